"""The sequence database: Easel's parse kept exactly, balanced length-sorted shards, checksums."""

from __future__ import annotations

import gzip
import hashlib
import json
import pickle
from types import SimpleNamespace

import numpy as np
import pyhmmer
import pytest

from gpuhmm import GpuhmmError, makedb
from gpuhmm.db import database as seqdb
from gpuhmm.db import plainfasta
from gpuhmm.db.database import SequenceDatabase
from gpuhmm.db.format import PackedText
from gpuhmm.db.index import FirstPositions
from gpuhmm.db.readahead import ReadAhead
from gpuhmm.worker.shards import ResidentShard

from helpers import formats
from helpers.data import DATA

PROTEINS = DATA / "proteins.faa"


def _easel_records(path):
    """Easel's records of an ASCII FASTA file; names and descriptions as the bytes it holds."""
    with pyhmmer.easel.SequenceFile(path, digital=True, alphabet=pyhmmer.easel.Alphabet.amino()) as handle:
        return [(seq.name.encode(), seq.description.encode(), bytes(np.asarray(seq.sequence))) for seq in handle]


def _database_records(database):
    records = {}
    for index in range(len(database.shards)):
        shard = database.load_shard(index)
        for i, position in enumerate(shard.source_index.tolist()):
            start, end = shard.offsets[i], shard.offsets[i + 1]
            records[position] = (shard.names[i], shard.descriptions[i], shard.residues[start:end].tobytes())
    return [records[position] for position in range(len(records))]


@pytest.mark.parametrize("shards", [1, 3, 8])
def test_shards_hold_exactly_what_easel_reads(tmp_path, shards):
    database = makedb(PROTEINS, tmp_path / "db", shards)
    assert _database_records(database) == _easel_records(PROTEINS)
    assert database.sequences == len(_easel_records(PROTEINS))


@pytest.mark.parametrize("shards", [1, 3])
def test_a_database_held_in_memory_equals_its_files(tmp_path, shards):
    on_disk = makedb(PROTEINS, tmp_path / "db", shards)
    in_memory = makedb(PROTEINS, None, shards)
    assert _database_records(in_memory) == _database_records(on_disk)
    for index in range(shards):
        held, stored = in_memory.load_shard(index), on_disk.load_shard(index)
        assert np.array_equal(held.offsets, stored.offsets) and np.array_equal(held.source_index, stored.source_index)
    assert [info.residues for info in in_memory.shards] == [info.residues for info in on_disk.shards]
    assert len(pickle.dumps(in_memory)) < 10_000  # task arguments carry no residues
    seqdb.release(in_memory)
    with pytest.raises(GpuhmmError, match="another process's memory, or released"):
        in_memory.load_shard(0)


@pytest.mark.parametrize("shards", [1, 3])
def test_a_read_ahead_holds_the_shards_makedb_reads(shards):
    read_ahead = ReadAhead(PROTEINS, shards)
    taken = read_ahead.take(PROTEINS, shards, "amino")
    assert taken is not None, "the helper process read nothing"
    name, held = taken
    read_here = makedb(PROTEINS, None, shards)
    assert name == read_here.alphabet_name
    ahead = seqdb._held_database(PROTEINS, name, held)
    assert _database_records(ahead) == _database_records(read_here) == _easel_records(PROTEINS)
    for index in range(shards):
        assert np.array_equal(ahead.load_shard(index).offsets, read_here.load_shard(index).offsets)
        assert np.array_equal(ahead.load_shard(index).source_index, read_here.load_shard(index).source_index)


def test_a_read_ahead_reports_the_files_problem_as_makedb_does(tmp_path):
    bad = tmp_path / "bad.faa"
    bad.write_text(">ok\nMKVLA\n>bad\nMKV1LA\n")
    with pytest.raises(GpuhmmError) as read_here:
        makedb(bad, None, alphabet="amino")
    with pytest.raises(GpuhmmError) as read_ahead:
        makedb(bad, None, alphabet="amino", read_ahead=ReadAhead(bad))
    assert str(read_ahead.value) == str(read_here.value)
    assert "bad.faa" in str(read_ahead.value)


def test_a_read_ahead_that_cannot_stand_in_leaves_makedb_to_read(tmp_path):
    assert ReadAhead(PROTEINS, 2).take(PROTEINS, 1, "amino") is None  # other shards
    assert ReadAhead(PROTEINS, 1).take(PROTEINS, 1, "dna") is None  # another alphabet
    stopped = ReadAhead(PROTEINS, 1)
    stopped.close()
    stopped.close()
    assert stopped.take(PROTEINS, 1, "amino") is None  # a helper stopped (or dead) reads nothing
    database = makedb(PROTEINS, None, 1, read_ahead=stopped)
    assert _database_records(database) == _easel_records(PROTEINS)


def test_the_cli_reads_a_fasta_ahead_in_a_helper_process(tmp_path, monkeypatch):
    from gpuhmm import cli

    def not_here(*_):
        raise AssertionError("the search read the FASTA in its own process")

    monkeypatch.setattr(seqdb, "read_shards", not_here)
    tblout = tmp_path / "hits.tblout"
    status = cli.main(
        [
            "search",
            "--backend",
            "cpu",
            "--cpu",
            "1",
            "--tblout",
            str(tblout),
            str(DATA / "pfam-tiny.hmm"),
            str(PROTEINS),
        ]
    )
    assert status == 0
    assert any(not line.startswith("#") for line in tblout.read_text().splitlines())


def test_edge_cases_survive_the_round_trip(tmp_path):
    fasta = tmp_path / "edge.faa"
    fasta.write_text(
        ">low lowercase\nmkvlaa\n>degenerate X B Z U O J\nMXBZUOJK\n>stop trailing star\nMKV*\n"
        ">one\nM\n>empty\n>dup first\nMKVLA\n>dup second\nMKVLAW\n>wrapped\nMKV\nLAW\nQQ\n>tabs \ta\t b  \nMK\n"
    )
    database = makedb(fasta, tmp_path / "db", 2, alphabet="amino")
    assert _database_records(database) == _easel_records(fasta)
    lengths = sorted(length for *_, length in [(r[0], len(r[2])) for r in _database_records(database)])
    assert lengths[0] == 0  # the empty record is kept: hmmsearch counts it in Z
    assert database.sequences == 9


#: Plain FASTA, which the plain reader takes: wrapped lines, blank lines, lowercase, '*',
#: empty records, names and descriptions among runs of spaces, '>' inside a line, no final LF.
PLAIN_FASTA = (
    ">low lowercase\nmkvlaa\n>degenerate X B Z U O J\nMXBZUOJK\n>stop trailing star\nMKV*\n"
    ">one\nM\n>empty\n>dup first\nMKVLA\n\n>   spaced   name  and  description  \nMKVLAW\n"
    ">wrapped >not a header\nMKV\nLAW\nQQ\n\n\n>\t tabbed\t \tname\t and description\t\nMK\n"
    ">last without a line feed\nMK"
)

#: FASTA that Easel reads but the plain reader leaves to it.
NOT_PLAIN_FASTA = {
    "header without a name": ">a\nMK\n> \nMK\n",
    "CRLF": ">a b\r\nMK\r\nL\r\n",
    "space in a sequence": ">a\nM K\n",
    "gap symbol": ">a\nMK-L\n",
    "dot": ">a\nMK.L\n",
    "'>' inside a sequence line": ">a\nMK>L\n",
    "leading blank line": "\n>a\nMK\n",
    "control character in a header": ">a b\x01c\nMK\n",
}


@pytest.fixture(params=["C", "numpy"])
def plain_reader(request, monkeypatch):
    """The plain FASTA reader and the shards' gathering in C (plainfasta.c, built here), or
    their fallbacks (numpy; Python's join)."""
    if request.param == "C":
        assert plainfasta._plain_scanner() is not None and plainfasta._gatherer() is not None
    else:
        monkeypatch.setattr(plainfasta, "_plain_scanner", lambda: None)
        monkeypatch.setattr(plainfasta, "_gatherer", lambda: None)
    return request.param


@pytest.mark.parametrize("chunk_bytes", [1, 20, 1 << 26])
def test_the_plain_reader_reads_plain_fasta_as_easel_does(tmp_path, monkeypatch, plain_reader, chunk_bytes):
    """Whole records cut at any byte, read on threads side by side, in file order."""
    monkeypatch.setattr(plainfasta, "PLAIN_CHUNK_BYTES", chunk_bytes)
    fasta = tmp_path / "plain.faa"
    fasta.write_text(PLAIN_FASTA)
    for source in (fasta, PROTEINS):
        columns = plainfasta.read(source, pyhmmer.easel.Alphabet.amino())
        assert columns is not None
        names, descriptions, codes, starts, ends = columns
        residues = [codes[start:end] for start, end in zip(starts, ends)]
        assert list(zip(names, descriptions, residues)) == _easel_records(source)


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize("piece_bytes", [20, 60, 1 << 20])
def test_the_plain_reader_reads_pieces_that_make_the_whole_file(
    tmp_path, monkeypatch, plain_reader, gzipped, piece_bytes
):
    """Pieces of whole records, some perhaps without one, whose records in turn are Easel's."""
    monkeypatch.setattr(plainfasta, "PLAIN_CHUNK_BYTES", 20)
    plain, packed = tmp_path / "plain.faa", tmp_path / "plain.faa.gz"
    plain.write_text(PLAIN_FASTA)
    packed.write_bytes(gzip.compress(PLAIN_FASTA.encode()))
    records = []
    amino = pyhmmer.easel.Alphabet.amino()
    for names, descriptions, codes, starts, ends in plainfasta.read_pieces(
        packed if gzipped else plain, amino, piece_bytes
    ):
        records += zip(names, descriptions, [codes[start:end] for start, end in zip(starts, ends)])
    assert records == _easel_records(plain)


def test_a_piece_that_is_not_plain_ends_the_pieces_with_none(tmp_path, monkeypatch, plain_reader):
    monkeypatch.setattr(plainfasta, "PLAIN_CHUNK_BYTES", 20)
    fasta = tmp_path / "late.faa"
    fasta.write_text(PLAIN_FASTA.replace(">last without", ">gapped\nMK-V\n>last without"))
    pieces = list(plainfasta.read_pieces(fasta, pyhmmer.easel.Alphabet.amino(), 40))
    assert len(pieces) > 2 and pieces[-1] is None and all(piece is not None for piece in pieces[:-1])


@pytest.mark.parametrize("case", sorted(NOT_PLAIN_FASTA))
def test_other_fasta_is_read_by_easel_itself(tmp_path, plain_reader, case):
    fasta = tmp_path / "other.faa"
    fasta.write_text(NOT_PLAIN_FASTA[case])
    assert plainfasta.read(fasta, pyhmmer.easel.Alphabet.amino()) is None
    try:
        expected = _easel_records(fasta)
    except ValueError:
        with pytest.raises(GpuhmmError, match="other.faa"):
            makedb(fasta, tmp_path / "db", alphabet="amino")
    else:
        assert _database_records(makedb(fasta, tmp_path / "db", alphabet="amino")) == expected


def test_gzip_is_read_by_content_not_name(tmp_path, plain_reader):
    packed = tmp_path / "proteins.fasta"  # compressed, without a .gz suffix
    packed.write_bytes(gzip.compress(PROTEINS.read_bytes()))
    assert _database_records(makedb(packed, tmp_path / "db", 2)) == _easel_records(PROTEINS)


def test_shards_are_balanced_and_sorted_longest_first(tmp_path):
    database = makedb(DATA / "heldout.faa", tmp_path / "db", 4)
    residues = [info.residues for info in database.shards]
    longest = max(len(r[2]) for r in _easel_records(DATA / "heldout.faa"))
    assert max(residues) - min(residues) <= longest
    for index in range(4):
        lengths = database.load_shard(index).lengths
        assert list(lengths) == sorted(lengths, reverse=True)
    assert sum(residues) == database.residues


def test_each_sequence_goes_to_the_shard_with_fewest_residues_ties_to_the_first():
    """The rule that decides a database's shards (and so their checksums), whatever the version
    that made them: in file order, to the lightest shard, an empty sequence counting one."""
    shards = seqdb._balance_by_residues(np.array([5, 5, 3, 3, 0, 7]), 3)
    assert [members.tolist() for members in shards] == [[0, 4], [1, 5], [2, 3]]


def test_a_loaded_shards_names_are_decoded_as_asked_for_and_read_as_a_list(tmp_path):
    database = makedb(PROTEINS, tmp_path / "db", 1)
    names = database.load_shard(0).names
    assert isinstance(names, PackedText)
    assert list(names) == [names[i] for i in range(len(names))]
    assert sorted(names) == sorted(name for name, _, _ in _easel_records(PROTEINS))
    assert names[-1] == names[len(names) - 1]
    with pytest.raises(IndexError):
        names[len(names)]
    assert list(pickle.loads(pickle.dumps(names))) == list(names)


def _first_positions_by_dictionary(shard):
    """The reference: a dictionary of (name, length) → 1-based position of its first sequence."""
    positions = {}
    for index in np.argsort(shard.source_index, kind="stable").tolist():
        positions.setdefault((shard.names[index], int(shard.lengths[index])), int(shard.source_index[index]) + 1)
    return positions


def test_first_positions_agree_with_a_dictionary_of_every_name_and_length(tmp_path):
    fasta = tmp_path / "duplicates.faa"
    # Repeated names, with the same length and with another; a name that is a prefix of another.
    fasta.write_text(">a\nACDE\n>b\nAC\n>a\nACDE\n>a\nACD\n>ab\nACDE\n>b\nGG\n>c d\nW\n")
    for shards in (1, 2):
        database = makedb(fasta, tmp_path / f"db{shards}", shards, alphabet="amino")
        in_memory = makedb(fasta, None, shards, alphabet="amino")
        for index in range(shards):
            for shard in (database.load_shard(index), in_memory.load_shard(index)):
                index_of_shard = FirstPositions(shard)
                expected = _first_positions_by_dictionary(shard)
                assert {pair: index_of_shard.find(*pair) for pair in expected} == expected
                with pytest.raises(KeyError):
                    index_of_shard.find(b"a", 99)


def test_positions_among_survivors_are_the_first_of_those(tmp_path):
    """A filtered model's hits are of its survivors: a name and length the shard repeats takes
    the first survivor's position, past those that did not survive."""
    fasta = tmp_path / "duplicates.faa"
    fasta.write_text(">a\nACDE\n>b\nAC\n>a\nACDE\n>a\nACD\n>b\nGG\n>a\nACDE\n")
    shard = ResidentShard(makedb(fasta, None, 1, alphabet="amino").load_shard(0), pyhmmer.easel.Alphabet.amino())
    among = shard.file_positions_among(np.array([2, 3, 4, 5]))  # in file order: the first a and b left out

    def hit(name, length):
        return SimpleNamespace(name=name, accession=None, description=None, length=length)

    assert [among(hit("a", 4)), among(hit("a", 3)), among(hit("b", 2))] == [3, 4, 5]
    assert [shard.file_position(hit("a", 4)), shard.file_position(hit("b", 2))] == [1, 2]
    with pytest.raises(KeyError):
        among(hit("c", 1))


def test_first_positions_of_colliding_hashes_still_come_from_the_names(tmp_path, monkeypatch):
    monkeypatch.setattr(FirstPositions, "_PRIME", 0)  # every name hashes alike: only lengths differ
    database = makedb(PROTEINS, tmp_path / "db", 1)
    shard = database.load_shard(0)
    expected = _first_positions_by_dictionary(shard)
    index_of_shard = FirstPositions(shard)
    assert {pair: index_of_shard.find(*pair) for pair in list(expected)[:50]} == dict(list(expected.items())[:50])


def test_manifest_counts(tmp_path):
    makedb(PROTEINS, tmp_path / "db", 2)
    manifest = json.loads((tmp_path / "db" / "manifest.json").read_text())
    records = _easel_records(PROTEINS)
    assert manifest["sequences"] == len(records)
    assert manifest["residues"] == sum(len(r[2]) for r in records)
    assert manifest["alphabet"] == "amino"
    assert len({shard["sha256"] for shard in manifest["shards"]}) == 2


def test_stale_shard_is_refused(tmp_path):
    makedb(PROTEINS, tmp_path / "db", 2)
    makedb(DATA / "heldout.faa", tmp_path / "other", 2)
    (tmp_path / "db" / "shard-0000.npz").write_bytes((tmp_path / "other" / "shard-0000.npz").read_bytes())
    database = SequenceDatabase.open(tmp_path / "db")
    with pytest.raises(GpuhmmError, match="stale or damaged"):
        database.load_shard(0)
    database.load_shard(1)


def test_a_loaded_shard_views_the_arrays_numpy_reads_from_its_file(tmp_path):
    database = makedb(PROTEINS, tmp_path / "db", 2)
    shard = database.load_shard(1)
    loaded = {
        "residues": shard.residues,
        "offsets": shard.offsets,
        "source_index": shard.source_index,
        "names": shard.names._data,
        "name_offsets": shard.names._offsets,
        "descriptions": shard.descriptions._data,
        "description_offsets": shard.descriptions._offsets,
    }
    with np.load(tmp_path / "db" / database.shards[1].file) as stored:
        assert sorted(stored.files) == sorted(loaded)
        for name, array in loaded.items():
            assert array.dtype == stored[name].dtype and np.array_equal(array, stored[name]), name


def test_a_shard_compressed_by_another_writer_is_refused_by_name(tmp_path):
    database = makedb(PROTEINS, tmp_path / "db", 1)
    path = tmp_path / "db" / database.shards[0].file
    with np.load(path) as stored:
        arrays = {name: stored[name] for name in stored.files}
    np.savez_compressed(path, **arrays)
    manifest_path = tmp_path / "db" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["shards"][0]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(GpuhmmError, match=r"shard-0000.npz.*not a database shard as `gpuhmm makedb` writes"):
        SequenceDatabase.open(tmp_path / "db").load_shard(0)


def test_more_shards_than_sequences(tmp_path):
    fasta = tmp_path / "two.faa"
    fasta.write_text(">a\nMKV\n>b\nMKVL\n")
    database = makedb(fasta, tmp_path / "db", 4, alphabet="amino")
    assert [info.sequences for info in database.shards].count(0) == 2


def _easel_records_with_accessions(path, format):
    """Easel's (name, accession, description, residues) of each sequence of `path` in `format`."""
    amino = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.easel.SequenceFile(path, format, digital=True, alphabet=amino) as handle:
        return [
            (seq.name.encode(), seq.accession.encode(), seq.description.encode(), bytes(np.asarray(seq.sequence)))
            for seq in handle
        ]


def _database_records_with_accessions(database):
    """`_database_records` with each sequence's accession second (b"" where it has none)."""
    records = {}
    for index in range(len(database.shards)):
        shard = database.load_shard(index)
        for i, position in enumerate(shard.source_index.tolist()):
            accession = b"" if shard.accessions is None else shard.accessions[i]
            residues = shard.residues[shard.offsets[i] : shard.offsets[i + 1]].tobytes()
            records[position] = (shard.names[i], accession, shard.descriptions[i], residues)
    return [records[position] for position in range(len(records))]


@pytest.mark.parametrize("format", ["embl", "genbank", "stockholm", "afa", "clustal"])
def test_shards_hold_what_easel_reads_from_other_formats_accessions_included(tmp_path, format):
    source = formats.write(formats.records(PROTEINS)[:30], tmp_path / "sequences.txt", format)
    expected = _easel_records_with_accessions(source, format)
    asserted = format if format == "afa" else None  # Easel reads aligned FASTA as FASTA, unless told
    on_disk = makedb(source, tmp_path / "db", 3, format=asserted)
    in_memory = makedb(source, None, 3, format=asserted)
    taken = ReadAhead(source, 3, asserted).take(source, 3, "amino", asserted)
    assert taken is not None, "the helper process read nothing"
    ahead = seqdb._held_database(source, *taken)
    for database in (on_disk, in_memory, ahead):
        assert _database_records_with_accessions(database) == expected
    assert any(accession for _, accession, _, _ in expected) == (format in ("embl", "genbank", "stockholm"))


def test_a_compressed_file_has_its_format_detected_unless_it_holds_an_alignment(tmp_path):
    """Easel detects an alignment's format by reading its text again, which a stream cannot give."""
    packed = {}
    for format in ("embl", "stockholm"):
        plain = formats.write(formats.records(PROTEINS)[:5], tmp_path / format, format)
        packed[format] = tmp_path / f"{format}.gz"
        packed[format].write_bytes(gzip.compress(plain.read_bytes()))
    embl = makedb(packed["embl"], tmp_path / "embl-db", alphabet="amino")
    assert _database_records_with_accessions(embl) == _easel_records_with_accessions(tmp_path / "embl", "embl")
    with pytest.raises(GpuhmmError, match="stockholm.gz: .* assert an alignment's"):
        makedb(packed["stockholm"], tmp_path / "sto-db", alphabet="amino")
    stockholm = makedb(packed["stockholm"], tmp_path / "sto-db", alphabet="amino", format="stockholm")
    expected = _easel_records_with_accessions(tmp_path / "stockholm", "stockholm")
    assert _database_records_with_accessions(stockholm) == expected


def test_a_read_ahead_of_another_format_leaves_makedb_to_read(tmp_path):
    source = formats.write(formats.records(PROTEINS)[:5], tmp_path / "sequences.sto", "stockholm")
    assert ReadAhead(source, 1).take(source, 1, "amino", "stockholm") is None
    assert ReadAhead(source, 1, "stockholm").take(source, 1, "amino") is None


def test_a_description_not_in_utf8_keeps_its_accession(tmp_path):
    """pyhmmer cannot decode it: the three fields are read back from Easel's own FASTA line."""
    embl = tmp_path / "latin1.embl"
    embl.write_bytes(
        b"ID   seq1   Reviewed;   5 AA.\nAC   P12345;\nDE   caf\xe9 au lait\nSQ   SEQUENCE\n     MKVLA\n//\n"
    )
    database = makedb(embl, tmp_path / "db", 1, alphabet="amino")
    assert [record[:3] for record in _database_records_with_accessions(database)] == [
        (b"seq1", b"P12345", b"caf\xe9 au lait")
    ]


def test_a_format_easel_cannot_read_is_one_error_naming_the_file(tmp_path):
    with pytest.raises(GpuhmmError, match=r"proteins.faa: not a readable embl file \(Line 1: failed to find ID line"):
        makedb(PROTEINS, tmp_path / "db", format="embl")
    with pytest.raises(GpuhmmError, match=r"proteins.faa: not a readable stockholm file"):
        makedb(PROTEINS, None, read_ahead=ReadAhead(PROTEINS, 1, "stockholm"), format="stockholm", alphabet="amino")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    with pytest.raises(GpuhmmError, match="blank.txt: sequence file is empty"):
        makedb(blank, tmp_path / "db", alphabet="amino")


def test_undecidable_alphabet_asks_for_one(tmp_path):
    fasta = tmp_path / "short.faa"
    fasta.write_text(">a\nAC\n")
    with pytest.raises(GpuhmmError, match="pass --alphabet"):
        makedb(fasta, tmp_path / "db")
