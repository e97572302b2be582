"""HMMER 3.4's state paths (`src/p7_trace.c`) as the tail builds them: `p7_trace_Append`,
`p7_trace_AppendWithPP`, `p7_trace_Reverse` and `p7_trace_Index`.

Tracebacks run from T back to S and are reversed at the end. States are HMMER's one-letter names.
"""

from __future__ import annotations

import dataclasses

#: States that emit on transition (their i is recorded only when they loop).
LOOPING = frozenset("NCJ")


@dataclasses.dataclass(frozen=True)
class TraceDomain:
    """One B..E segment of a trace (`p7_trace_Index`): its first and last M state, in sequence and
    model coordinates, and its trace steps."""

    tfrom: int  # step of B
    tto: int  # step of E
    sqfrom: int
    sqto: int
    hmmfrom: int
    hmmto: int


@dataclasses.dataclass
class Trace:
    """A `P7_TRACE`: state, node k and residue i of each step, with posteriors when built by
    `p7_OATrace`."""

    st: list[str] = dataclasses.field(default_factory=list)
    k: list[int] = dataclasses.field(default_factory=list)
    i: list[int] = dataclasses.field(default_factory=list)
    pp: list[float] | None = None

    def append(self, state, k, i, pp=0.0):
        """`p7_trace_Append` (or `AppendWithPP` when the trace keeps posteriors): N, C, J record i
        (and pp) only when they loop; M, I record both k and i; D records k only."""
        looping = state in LOOPING and bool(self.st) and self.st[-1] == state
        emits = state in "MI" or looping
        self.st.append(state)
        self.k.append(k if state in "MID" else 0)
        self.i.append(i if emits else 0)
        if self.pp is not None:
            self.pp.append(pp if emits else 0.0)

    def reverse(self):
        """`p7_trace_Reverse`: move each N/C/J residue to the first of a looping pair (tracebacks
        record it on the second), then reverse the steps."""
        for z in range(len(self.st) - 1):
            if self.st[z] in LOOPING and self.st[z + 1] == self.st[z] and self.i[z] == 0 and self.i[z + 1] > 0:
                self.i[z], self.i[z + 1] = self.i[z + 1], 0
                if self.pp is not None:
                    self.pp[z], self.pp[z + 1] = self.pp[z + 1], 0.0
        for column in (self.st, self.k, self.i, self.pp):
            if column is not None:
                column.reverse()

    def domains(self):
        """`p7_trace_Index`: the B..E segments in order. Only M states set the coordinates."""
        found, start, first, last = [], 0, None, None
        for z, state in enumerate(self.st):
            if state == "B":
                start, first, last = z, None, None
            elif state == "M":
                first = first or (self.i[z], self.k[z])
                last = (self.i[z], self.k[z])
            elif state == "E":
                found.append(TraceDomain(start, z, first[0], last[0], first[1], last[1]))
        return found


def traced_back(select, L, with_posteriors=False):
    """The traceback both `p7_StochasticTrace` and `p7_OATrace` run, from T at residue `L` back to
    S, reversed: `select` picks each step's state (its `m`, `d`, `i`, `c_or_j`, `e` and `b`), and
    gives the step's posterior (`posterior`) for a trace that keeps them."""
    trace = Trace(pp=[] if with_posteriors else None)
    i, k = L, 0
    trace.append("T", k, i)
    trace.append("C", k, i)
    previous = "C"
    while previous != "S":
        if previous == "M":
            state = select.m(i, k)
            k, i = k - 1, i - 1
        elif previous == "D":
            state = select.d(i, k)
            k -= 1
        elif previous == "I":
            state = select.i(i, k)
            i -= 1
        elif previous == "N":
            state = "S" if i == 0 else "N"
        elif previous in "CJ":
            state = select.c_or_j(previous, i)
        elif previous == "E":
            state, k = select.e(i)
        else:  # B
            state = select.b(i)
        trace.append(state, k, i, select.posterior(state, previous, k, i) if with_posteriors else 0.0)
        if state in LOOPING and state == previous:
            i -= 1
        previous = state
    trace.reverse()
    return trace
