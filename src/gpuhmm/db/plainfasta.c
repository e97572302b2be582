/* Easel's reading of plain FASTA (easel/esl_sqio_ascii.c: header_fasta, then seq_fasta through
 * the alphabet's input map), on one chunk of whole records; plainfasta.py's numpy reader does
 * the same and stays as the fallback where no C compiler is found.
 *
 * Plain: the text starts with '>'; a header line (after '>') holds printable ASCII, tabs and
 * bytes 0x80-0xFF; sequence lines hold only bytes `table` digitizes (not NOT_PLAIN); lines end
 * in LF. A record's name is the header's first run of neither space nor tab, after any spaces
 * and tabs; its description the rest of the line after the spaces and tabs that follow the name.
 * A record ends at the next line that starts with '>'.
 *
 * One thread, serial over the chunk; the caller runs chunks on threads (ctypes releases the
 * GIL). Integers only: offsets are int64, so no overflow for any chunk that fits in memory.
 */
#include <stdint.h>
#include <string.h>

#define NOT_PLAIN 255

static int is_blank(uint8_t c) { return c == ' ' || c == '\t'; }

/* The records of text[0, n): their residues' digital codes end to end into `codes` (record r's
 * end at ends[r]), their names and their descriptions into `names` and `descriptions`, each
 * followed by a line feed (neither holds one). Each output takes at most n bytes; their sizes go
 * to sizes[0..2]. Returns the number of records; -1 where the text is not plain; -2 past
 * `capacity` records. */
int64_t plain_fasta_chunk(const uint8_t *text, int64_t n, const uint8_t *table, uint8_t *codes, int64_t *ends,
                          uint8_t *names, uint8_t *descriptions, int64_t capacity, int64_t *sizes) {
    int64_t at = 0, out = 0, named = 0, described = 0, count = 0;
    if (n == 0 || text[0] != '>') return -1;
    while (at < n) { /* text[at] is the '>' that starts a header line */
        int64_t end = at + 1, i, start;
        if (count == capacity) return -2;
        while (end < n && text[end] != '\n') end++;
        for (i = at + 1; i < end; i++) {
            uint8_t c = text[i];
            if (!((c >= 0x20 && c != 0x7F) || c == '\t')) return -1;
        }
        for (i = at + 1; i < end && is_blank(text[i]); i++) {
        }
        for (start = i; i < end && !is_blank(text[i]); i++) names[named++] = text[i];
        if (i == start) return -1; /* a header without a name: Easel reports it */
        names[named++] = '\n';
        while (i < end && is_blank(text[i])) i++;
        for (; i < end; i++) descriptions[described++] = text[i];
        descriptions[described++] = '\n';
        for (i = end < n ? end + 1 : n; i < n && text[i] != '>';) { /* a sequence line at i */
            for (; i < n && text[i] != '\n'; i++) {
                uint8_t code = table[text[i]];
                if (code == NOT_PLAIN) return -1;
                codes[out++] = code;
            }
            if (i < n) i++;
        }
        ends[count++] = out;
        at = i;
    }
    sizes[0] = out, sizes[1] = named, sizes[2] = described;
    return count;
}

/* A shard's residues (fasta.py's Parsed.shard): record m's codes[starts[m], ends[m]) for each m
 * of members[0, count), end to end into `out`, in that order. */
void gather_records(const uint8_t *codes, const int64_t *starts, const int64_t *ends, const int64_t *members,
                    int64_t count, uint8_t *out) {
    for (int64_t i = 0; i < count; i++) {
        int64_t m = members[i], n = ends[m] - starts[m];
        memcpy(out, codes + starts[m], (size_t)n);
        out += n;
    }
}
