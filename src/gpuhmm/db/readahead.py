"""A sequence file read into in-memory shards by a helper process while the search starts up."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

from ..errors import GpuhmmError
from .database import read_shards

#: Files up to this size are read ahead. The helper and its message hold the shards twice more
#: for a moment, and past a few GB the search takes so long that the seconds saved do not count.
READ_AHEAD_MAX_BYTES = 2 * 1024**3
#: The alphabet the helper reads the file in.
READ_AS = "amino"


class ReadAhead:
    """A sequence file read into in-memory shards by a helper process while this one starts up.

    Reading 100 M residues holds this process's interpreter lock for seconds, which importing
    CuPy and Dask, reading the models and starting the workers would otherwise wait behind.
    The alphabet comes from the models, which are read meanwhile, so the helper reads the file
    as protein (READ_AS), what nearly every search wants; `makedb` takes its shards where that
    is the alphabet wanted, and otherwise reads the file itself. The helper is a fresh
    interpreter, not a multiprocessing child, so no caller's main module is re-run.
    """

    def __init__(self, fasta, shards=1, format=None):
        self.fasta, self.shards, self.format = Path(fasta), shards, format
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
        self._connection, helper_end = socket.socketpair()
        with helper_end:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from gpuhmm.db.readahead import _helper_main; _helper_main()",
                    str(fasta),
                    str(shards),
                    format or "",
                ],
                stdin=subprocess.DEVNULL,
                stdout=helper_end.fileno(),
                env=environment,
            )
        # Received in a thread as it comes. A socket, not a pipe: one MSG_WAITALL receive takes
        # the whole message with the interpreter lock released once, where a pipe's 64 KB reads
        # would each wait for the lock again behind this process's busy threads.
        self._outcome = ("failed",)
        self._receiving = threading.Thread(target=self._receive, name="gpuhmm-read-ahead", daemon=True)
        self._receiving.start()

    def _receive(self):
        try:
            (size,) = struct.unpack("<Q", _receive_exactly(self._connection, 8))
            self._outcome = pickle.loads(_receive_exactly(self._connection, size))
        except (EOFError, OSError, pickle.UnpicklingError):  # the helper died or was stopped
            pass

    def take(self, fasta, shards, alphabet, format=None):
        """(alphabet name, shards) as `makedb(fasta, None, shards, alphabet, format=format)` would
        read them, or None where this read cannot stand in for that one. Raises the helper's
        GpuhmmError."""
        if (Path(fasta), shards, format) != (self.fasta, self.shards, self.format):
            self.close()
            return None
        self._receiving.join()
        self.close()
        outcome = self._outcome
        if alphabet != READ_AS:
            return None
        if outcome[0] == "error":
            raise GpuhmmError(*outcome[1:])
        return (READ_AS, outcome[1]) if outcome[0] == "shards" else None

    def close(self):
        """Stop the helper if it is still reading (the search stopped first)."""
        if self._connection.fileno() == -1:
            return
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        self._connection.shutdown(socket.SHUT_RDWR)  # wakes the receiving thread
        self._receiving.join()
        self._connection.close()


def _receive_exactly(connection, size):
    message = bytearray(size)
    view, received = memoryview(message), 0
    while received < size:
        count = connection.recv_into(view[received:], size - received, socket.MSG_WAITALL)
        if not count:
            raise EOFError("the helper closed its end early")
        received += count
    return message


def _helper_main():
    """The helper's side of `ReadAhead` (argv: sequence file, shards, format or ""). Writes to
    stdout, the socket, the length and pickle of ("shards", shards), ("error", source, problem)
    for a GpuhmmError, or ("failed",) for the caller to read the file itself."""
    fasta, shards, format = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] or None
    try:
        outcome = ("shards", read_shards(fasta, READ_AS, shards, format)[1])
    except GpuhmmError as error:
        outcome = ("error", error.source, error.problem)
    except Exception:  # noqa: BLE001 - the caller reads the file itself and reports the problem in full
        outcome = ("failed",)
    message = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        sys.stdout.buffer.write(struct.pack("<Q", len(message)))
        sys.stdout.buffer.write(message)
        sys.stdout.buffer.flush()
    except OSError:  # the search stopped first, and its end of the socket is closed
        pass
