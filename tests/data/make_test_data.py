#!/usr/bin/env python3
"""Regenerate the gpuhmm test inputs in this directory.

Outputs (all written next to this script unless --out is given):

  pfam-test.h3m.gz  24 real Pfam 35.0 models (HMMER3 binary, gzipped)
  pfam-tiny.hmm     3 short real Pfam models (HMMER3 text format)
  proteins.faa      main target set: real proteins + hmmemit samples + edge cases
  heldout.faa       separate target set (different real proteins, different
                    hmmemit seeds) that is never used for tuning
  phmmer-queries.faa  12 real proteins of heldout.faa, the phmmer queries

Everything is deterministic: running the script twice gives byte-identical
files (fixed seeds for Python's random.Random and for ``hmmemit --seed``;
gzip written with mtime=0 and no embedded file name).

Requirements: pyhmmer (tested with 0.12.3) and the HMMER 3.4 ``hmmemit``
binary (from PATH, or from the PyPI ``hmmer`` package's data/bin folder).
"""

import argparse
import gzip
import io
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyhmmer.easel import Alphabet, DigitalSequenceBlock, TextSequence
from pyhmmer.plan7 import HMMFile, Pipeline

from helpers import binaries as hmmer_binaries  # noqa: E402  (tests/helpers/binaries.py)

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------
# Selection rules (fixed, so that the output is reproducible)
# ---------------------------------------------------------------------------

SOURCE_HMMS = "pfam-subset-2766.h3m.gz"
SOURCE_PROTEOME = "proteome-HG003687.faa"

# The 24 test models, by Pfam name.  They were picked by hand from the models
# of pfam-subset-2766 (all of which carry GA/TC/NC cutoffs) that have at least
# one --cut_ga hit in proteome-HG003687.faa (except PEPcase, which only gets
# hits from its own hmmemit samples), to give a spread of lengths:
#   M < 50     : Fer4 (24), TPR_1 (34), PTS_EIIB (34), HTH_AraC (42)
#   50..99     : HTH_3 (55), CBS (57), HisKA (67), S1 (75)
#   100..400   : 13 models (ABC_tran has ~100 GA hits in the proteome;
#                TPR_1 has a sequence that passes GA with no domain passing GA;
#                CBS / S1 / tRNA-synt_1g give multi-domain hits)
#   M >= 700   : Phosphorylase (713), PEPcase (920)
# plus three models whose Pfam cutoffs are far apart, used with the
# "edge_band_*" targets below so that --cut_ga, --cut_tc and --cut_nc give
# different results (for most Pfam 35 models GA == TC and NC == GA - 0.1):
#   HAMP (53)     GA 25.0/15.0  TC 25.0/31.6  NC 24.9/-1000000.0
#   DUF6072 (129) GA 53.3/53.3  TC 71.6/71.3  NC 26.3/26.0
#   DUF6304 (157) GA 35.8/35.8  TC 50.2/45.5  NC 26.3/25.6
# They are written in the order in which they appear in the source file.
TEST_MODELS = [
    "Fer4",
    "TPR_1",
    "PTS_EIIB",
    "HTH_AraC",
    "HTH_3",
    "CBS",
    "HisKA",
    "S1",
    "ABC_tran",
    "AAA",
    "Acetyltransf_1",
    "HATPase_c",
    "Response_reg",
    "Radical_SAM",
    "BPD_transp_1",
    "GTP_EFTU",
    "Hydrolase",
    "Abhydrolase_1",
    "ABC_membrane",
    "SBP_bac_1",
    "tRNA-synt_1g",
    "HAMP",
    "DUF6072",
    "DUF6304",
    "Phosphorylase",
    "PEPcase",
]

# Three short models written in HMMER3 *text* format.  Fer4 and HTH_AraC are
# also in the binary test file (text vs binary input of the same model);
# TetR_N is not (it has real hits in the proteome).
TINY_MODELS = ["Fer4", "HTH_AraC", "TetR_N"]

SEED = 20240611  # master seed for Python's random.Random
N_REAL_MAIN = 300  # real proteins in proteins.faa
N_REAL_HELDOUT = 100  # real proteins in heldout.faa (disjoint from main)
N_PHMMER_QUERIES = 12  # the first real proteins of heldout.faa, as phmmer queries
N_BACKGROUND = 150  # real proteins whose residues are shuffled to make
# the background of the ~35 kb edge-case sequence
GIANT_LENGTH = 35000

# hmmemit seeds (must be > 0: --seed 0 means "arbitrary seed" in HMMER).
# Model i (0-based index in TEST_MODELS) uses:
#   proteins.faa : core samples  seed = 1000 + i,  profile samples seed = 2000 + i
#   heldout.faa  : core samples  seed = 5000 + i,  profile samples seed = 6000 + i
#   edge cases   : seed = 9000 + k (see make_edge_cases)
MAIN_CORE_SEED, MAIN_PROF_SEED = 1000, 2000
HELD_CORE_SEED, HELD_PROF_SEED = 5000, 6000
EDGE_SEED = 9000
PROFILE_L = 150  # hmmemit -p -L: expected flank length

# line widths cycled over the records of proteins.faa (0 = unwrapped)
WIDTHS_MAIN = [60, 80, 37, 0, 60, 72, 80, 50, 60, 61]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def find_binary(name):
    """A HMMER binary (`hmmer_binaries.find_binary`), or exit."""
    path = hmmer_binaries.find_binary(name)
    if path is None:
        sys.exit(f"error: cannot find HMMER binary {name!r}")
    return path


def read_fasta_raw(path):
    """Minimal FASTA reader -> list of (header_without_gt, sequence_string).
    Keeps the sequence exactly as written (including a trailing '*')."""
    records = []
    header, chunks = None, []
    with open(path) as fh:
        for line in fh:
            line = line.rstrip("\r\n")
            if line.startswith(">"):
                if header is not None:
                    records.append((header, "".join(chunks)))
                header, chunks = line[1:], []
            elif line.strip():
                chunks.append(line.strip())
    if header is not None:
        records.append((header, "".join(chunks)))
    return records


def format_record(header, seq, width):
    out = [">" + header + "\n"]
    if seq:
        if width and width > 0:
            for i in range(0, len(seq), width):
                out.append(seq[i : i + width] + "\n")
        else:
            out.append(seq + "\n")
    return "".join(out)


def write_deterministic_gzip(path, data):
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
            gz.write(data)


def load_models(src, names):
    wanted = set(names)
    found = {}
    with HMMFile(src) as fh:
        for hmm in fh:
            if hmm.name in wanted:
                found[hmm.name] = hmm
    missing = wanted - set(found)
    if missing:
        sys.exit(f"error: models not found in {src}: {sorted(missing)}")
    for name, hmm in found.items():
        c = hmm.cutoffs
        if not (c.gathering_available() and c.trusted_available() and c.noise_available()):
            sys.exit(f"error: model {name} lacks GA/TC/NC cutoffs")
    return found


def source_order(src, names):
    """Names in the order of the source file."""
    wanted = set(names)
    order = []
    with HMMFile(src) as fh:
        for hmm in fh:
            if hmm.name in wanted:
                order.append(hmm.name)
    return order


class Emitter:
    """Runs the real `hmmemit` on single-model temporary files."""

    def __init__(self, models, tmpdir):
        self.hmmemit = find_binary("hmmemit")
        self.paths = {}
        for name, hmm in models.items():
            path = os.path.join(tmpdir, name + ".h3m")
            with open(path, "wb") as fh:
                hmm.write(fh, binary=True)
            self.paths[name] = path

    def emit(self, name, n, seed, profile=False):
        assert seed > 0
        cmd = [self.hmmemit, "--seed", str(seed), "-N", str(n)]
        if profile:
            cmd += ["-p", "-L", str(PROFILE_L)]
        cmd.append(self.paths[name])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        seqs = [s for _, s in read_fasta_raw_text(out)]
        assert len(seqs) == n, (name, n, len(seqs))
        return seqs


def read_fasta_raw_text(text):
    with tempfile.NamedTemporaryFile("w", suffix=".fa", delete=False) as fh:
        fh.write(text)
        tmp = fh.name
    try:
        return read_fasta_raw(tmp)
    finally:
        os.unlink(tmp)


# ---------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------


def emitted_records(emitter, models, n_core, n_prof, core_seed, prof_seed, tag):
    """hmmemit samples for every test model -> list of (header, seq)."""
    recs = []
    for i, name in enumerate(TEST_MODELS):
        acc = models[name].accession or "-"
        k = 0
        if n_core:
            seed = core_seed + i
            for j, s in enumerate(emitter.emit(name, n_core, seed), 1):
                k += 1
                desc = f"hmmemit --seed {seed} -N {n_core} sample {j} of {name} {acc} (core model) [{tag}]"
                recs.append((f"emit_{name}_{k}", desc, s))
        if n_prof:
            seed = prof_seed + i
            for j, s in enumerate(emitter.emit(name, n_prof, seed, profile=True), 1):
                k += 1
                desc = (
                    f"hmmemit -p -L {PROFILE_L} --seed {seed} -N {n_prof} "
                    f"sample {j} of {name} {acc} (local multihit profile) [{tag}]"
                )
                recs.append((f"emit_{name}_{k}", desc, s))
    # every 5th emitted record gets no description at all (tblout prints "-")
    out = []
    for idx, (nm, desc, s) in enumerate(recs):
        header = nm if idx % 5 == 4 else f"{nm} {desc}"
        out.append((header, s))
    return out


def make_giant(rng, emitter, background_seqs):
    """~35 kb sequence: shuffled real-protein background with emitted domains
    (core samples of several test models) embedded at spread-out positions."""
    inserts = []
    inserted_models = [
        "ABC_tran",
        "Response_reg",
        "HATPase_c",
        "GTP_EFTU",
        "Radical_SAM",
        "Phosphorylase",
        "CBS",
        "HTH_3",
        "ABC_tran",
        "AAA",
    ]
    for k, name in enumerate(inserted_models):
        inserts.append(emitter.emit(name, 1, EDGE_SEED + 100 + k)[0])
    pool = list("".join(s.rstrip("*") for s in background_seqs))
    rng.shuffle(pool)
    n_bg = GIANT_LENGTH - sum(len(s) for s in inserts)
    assert len(pool) >= n_bg, (len(pool), n_bg)
    bg = pool[:n_bg]
    # cut the background into len(inserts)+1 pieces of near-equal size
    pieces = len(inserts) + 1
    cuts = [round(n_bg * p / pieces) for p in range(pieces + 1)]
    parts = []
    for p in range(pieces):
        parts.append("".join(bg[cuts[p] : cuts[p + 1]]))
        if p < len(inserts):
            parts.append(inserts[p])
    seq = "".join(parts)
    assert len(seq) == GIANT_LENGTH
    desc = "shuffled residues of {} real proteins with embedded hmmemit core samples of {}".format(
        len(background_seqs),
        ",".join(inserted_models),
    )
    return ("edge_giant_35k " + desc, seq)


AMINO = "ACDEFGHIKLMNPQRSTVWY"


def score_candidates(hmm, seqs):
    """Score plain-text sequences against one model with pyhmmer's default
    pipeline -> {index: (sequence score, [domain scores])}.  Scores do not
    depend on Z or on the other sequences, so this is deterministic and
    agrees with hmmsearch."""
    abc = Alphabet.amino()
    block = DigitalSequenceBlock(
        abc, [TextSequence(name=str(i).encode(), sequence=s).digitize(abc) for i, s in enumerate(seqs)]
    )
    hits = Pipeline(abc, Z=1000, domZ=1000).search_hmm(hmm, block)
    return {int(h.name): (h.score, [d.score for d in h.domains]) for h in hits}


def make_band_targets(rng, emitter, models):
    """Targets whose *sequence* score falls between two of a model's Pfam
    cutoffs (NC <= score < GA, GA <= score < TC), so that --cut_nc, --cut_ga
    and --cut_tc report different hits.  Candidates are hmmemit core samples,
    progressively mutated copies of them, and concatenations of two samples;
    for each band the candidate nearest to the band's midpoint (at least 1 bit
    inside both edges) is kept."""
    recs = []
    for m, name in enumerate(["DUF6072", "DUF6304", "HAMP"]):
        hmm = models[name]
        base = [emitter.emit(name, 1, EDGE_SEED + 300 + 10 * m + j)[0] for j in range(4)]
        cands, labels = [], []
        for j, b in enumerate(base):
            for k in range(30):
                p = k / 40
                cands.append("".join(c if rng.random() >= p else rng.choice(AMINO) for c in b))
                labels.append(f"sample {j + 1} with {k}/40 of residues randomised")
        for j in range(len(base) - 1):
            cands.append(base[j] + base[j + 1])
            labels.append(f"samples {j + 1}+{j + 2} concatenated")
        scores = score_candidates(hmm, cands)
        c = hmm.cutoffs
        bands = [("ncga", c.noise[0], c.gathering[0]), ("gatc", c.gathering[0], c.trusted[0])]
        for band, lo, hi in bands:
            if hi - lo < 3:
                continue
            mid = (lo + hi) / 2
            ok = [(abs(sc - mid), i) for i, (sc, _) in scores.items() if lo + 1 <= sc < hi - 1]
            if not ok:
                sys.exit(f"error: no {band} band candidate for {name}")
            _, i = min(ok)
            recs.append(
                (
                    f"edge_band_{name}_{band} hmmemit {name} {labels[i]}; "
                    f"sequence score between the {band[:2].upper()} and "
                    f"{band[2:].upper()} cutoffs",
                    cands[i],
                    60,
                )
            )
    # HAMP's NC domain cutoff is -1000000: with --cut_nc every domain of a
    # passing sequence is reported.  A strong sample followed by a weak one.
    hmm = models["HAMP"]
    strong = emitter.emit("HAMP", 1, EDGE_SEED + 400)[0]
    weak_base = emitter.emit("HAMP", 1, EDGE_SEED + 401)[0]
    weak = []
    for k in range(10, 30):
        weak.append("".join(ch if rng.random() >= k / 40 else rng.choice(AMINO) for ch in weak_base))
    linker = "GSGSGSGSGSGSGSGSGSGS"
    cands = [strong + linker + w for w in weak]
    scores = score_candidates(hmm, cands)
    ok = [
        (len(d), -min(d), i) for i, (sc, d) in scores.items() if len(d) >= 2 and min(d) < hmm.cutoffs.gathering[1] - 1
    ]
    if not ok:
        sys.exit("error: no weak-domain candidate for HAMP")
    _, _, i = max(ok)
    recs.append(
        (
            "edge_band_HAMP_weakdom strong + weak hmmemit HAMP samples (second domain below the GA domain cutoff)",
            cands[i],
            60,
        )
    )
    return recs


def make_edge_cases(rng, emitter, lowercase_src, background_seqs, models):
    """Returns list of (header, seq, width) edge-case records."""
    e = EDGE_SEED
    recs = []

    # 1. whole sequence in lowercase (a real protein + an emitted one)
    hdr, s = lowercase_src
    recs.append(("edge_lowercase_real " + hdr.split(None, 1)[0] + " real protein written in lowercase", s.lower(), 60))
    s = emitter.emit("GTP_EFTU", 1, e + 1)[0]
    recs.append(("edge_lowercase_emit hmmemit GTP_EFTU sample in lowercase", s.lower(), 60))

    # 2. ambiguity / rare residue codes X B Z U O J (Easel amino alphabet)
    s = list(emitter.emit("ABC_tran", 1, e + 2)[0])
    codes = "XBZUOJ"
    positions = sorted(rng.sample(range(5, len(s) - 5), 12))
    for k, pos in enumerate(positions):
        s[pos] = codes[k % len(codes)]
    s = "".join(s[:20]) + "XXXXX" + "".join(s[20:])  # plus a run of X
    recs.append(("edge_ambiguous hmmemit ABC_tran sample with X B Z U O J residues", s, 60))

    # 3. length-1 sequence
    recs.append(("edge_len1 single residue", "W", 60))

    # 4. length-0 record (header immediately followed by the next header)
    recs.append(("edge_len0 zero-length record", "", 60))

    # 5. ~35,000 residue sequence
    hdr, s = make_giant(rng, emitter, background_seqs)
    recs.append((hdr, s, 60))

    # 6. two different records with the same name; both hit ABC_tran
    s1 = emitter.emit("ABC_tran", 1, e + 3)[0]
    s2 = emitter.emit("ABC_tran", 1, e + 4)[0] + emitter.emit("Response_reg", 1, e + 5)[0]
    recs.append(("edge_dup_name first record (hmmemit ABC_tran)", s1, 60))
    recs.append(("edge_dup_name second record (hmmemit ABC_tran + Response_reg)", s2, 80))

    # 7. description with runs of spaces and tabs (incl. trailing whitespace);
    #    hmmsearch strips the whitespace after the name, keeps the rest as-is
    s = emitter.emit("HATPase_c", 1, e + 6)[0]
    recs.append(("edge_spacey_desc   several   spaces\tand\ttabs\t in  the description \t ", s, 37))

    # 8. a long sequence name (wider than the 20-column default of tblout)
    s = emitter.emit("Response_reg", 1, e + 7)[0]
    recs.append(("edge_long_name_" + "abcdefghij" * 5 + " name is 65 characters long", s, 0))

    # 9. a header with a name and a trailing space but no description
    s = emitter.emit("HTH_3", 1, e + 8)[0]
    recs.append(("edge_no_desc ", s, 60))

    # 10. sequences scoring between the NC/GA/TC cutoffs of some models
    recs.extend(make_band_targets(rng, emitter, models))
    return recs


def build(shared, outdir):
    src_hmm = os.path.join(shared, SOURCE_HMMS)
    src_prot = os.path.join(shared, SOURCE_PROTEOME)

    # ---- models ---------------------------------------------------------
    all_names = sorted(set(TEST_MODELS) | set(TINY_MODELS))
    models = load_models(src_hmm, all_names)

    buf = io.BytesIO()
    for name in source_order(src_hmm, TEST_MODELS):
        models[name].write(buf, binary=True)
    write_deterministic_gzip(os.path.join(outdir, "pfam-test.h3m.gz"), buf.getvalue())

    buf = io.BytesIO()
    for name in source_order(src_hmm, TINY_MODELS):
        models[name].write(buf, binary=False)
    with open(os.path.join(outdir, "pfam-tiny.hmm"), "wb") as fh:
        fh.write(buf.getvalue())

    # ---- real proteins ------------------------------------------------------
    proteome = read_fasta_raw(src_prot)
    rng = random.Random(SEED)
    idx = list(range(len(proteome)))
    rng.shuffle(idx)
    n0 = N_REAL_MAIN
    n1 = n0 + N_REAL_HELDOUT
    main_real = [proteome[i] for i in sorted(idx[:n0])]
    held_real = [proteome[i] for i in sorted(idx[n0:n1])]
    lowercase_src = proteome[idx[n1]]
    background = [proteome[i][1] for i in idx[n1 + 1 : n1 + 1 + N_BACKGROUND]]

    with tempfile.TemporaryDirectory() as tmp:
        emitter = Emitter(models, tmp)

        # ---- proteins.faa --------------------------------------------------
        emitted = emitted_records(emitter, models, 2, 2, MAIN_CORE_SEED, MAIN_PROF_SEED, "main")
        edge = make_edge_cases(rng, emitter, lowercase_src, background, models)

        body = [(h, s, None) for h, s in main_real] + [(h, s, None) for h, s in emitted]
        rng.shuffle(body)
        for k, (h, s, _) in enumerate(body):
            body[k] = (h, s, WIDTHS_MAIN[k % len(WIDTHS_MAIN)])
        # edge cases at fixed, spread-out positions (never first/last record)
        step = len(body) // (len(edge) + 1)
        for k, rec in enumerate(edge):
            body.insert(step * (k + 1) + k, rec)
        text = []
        for k, (h, s, w) in enumerate(body):
            text.append(format_record(h, s, w))
            if k == len(body) // 2:
                text.append("\n")  # one stray blank line between records
        with open(os.path.join(outdir, "proteins.faa"), "w") as fh:
            fh.write("".join(text))

        # ---- heldout.faa ---------------------------------------------------
        emitted_h = emitted_records(emitter, models, 1, 1, HELD_CORE_SEED, HELD_PROF_SEED, "heldout")
        emitted_h = [(h.replace("emit_", "heldemit_", 1), s) for h, s in emitted_h]
        body = list(held_real) + emitted_h
        rng.shuffle(body)
        with open(os.path.join(outdir, "heldout.faa"), "w") as fh:
            fh.write("".join(format_record(h, s, 60) for h, s in body))

        # ---- phmmer-queries.faa --------------------------------------------
        with open(os.path.join(outdir, "phmmer-queries.faa"), "w") as fh:
            fh.write("".join(format_record(h, s, 60) for h, s in held_real[:N_PHMMER_QUERIES]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", required=True, help="folder with pfam-subset-2766.h3m.gz and proteome-HG003687.faa")
    ap.add_argument("--out", default=HERE, help="output folder (default: the script's folder)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    build(args.shared, args.out)
    for f in ("pfam-test.h3m.gz", "pfam-tiny.hmm", "proteins.faa", "heldout.faa", "phmmer-queries.faa"):
        p = os.path.join(args.out, f)
        print(f"{f}\t{os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
