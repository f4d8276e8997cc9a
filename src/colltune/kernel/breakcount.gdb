# Counts, per kernel point, the calls into a library's internal functions whose names match
# COLLTUNE_BREAK_LIST (a gdb regex, to list them fast) and COLLTUNE_BREAK_MATCH (a Python
# regex), on the rank gdb runs. Loaded by gdb -batch -x; the
# counts go to COLLTUNE_BREAK_OUT as JSON {size: {function: calls}}. Used where a library
# leaves no other record of the algorithm it ran (Intel MPI: backends/impi_proof.py).
set pagination off
set confirm off
set breakpoint pending on
python
import json, os, re
import gdb

_want = re.compile(os.environ["COLLTUNE_BREAK_MATCH"])
_out = os.environ["COLLTUNE_BREAK_OUT"]
_counts = {}
_point = [None]


class _Count(gdb.Breakpoint):
    def stop(self):
        if self.location == "collbench_point":
            # x86-64 SysV: the second argument (the size) is in rsi; no debug info needed
            _point[0] = str(int(gdb.parse_and_eval("(long long)$rsi")))
        elif _point[0] is not None:
            per = _counts.setdefault(_point[0], {})
            per[self.location] = per.get(self.location, 0) + 1
        return False


def _save(event):
    with open(_out, "w") as f:
        json.dump(_counts, f)


gdb.events.exited.connect(_save)
_Count("collbench_point", internal=True)
# where the library's functions are all loaded: MPI_Init, or (COLLTUNE_BREAK_AFTER) a later
# point for a library that opens its components inside MPI_Init (Open MPI's as DSOs)
gdb.execute("break " + os.environ.get("COLLTUNE_BREAK_AFTER", "MPI_Init"))
gdb.execute("run")
# the library is loaded now: a counting breakpoint on each of its functions that match
_names = set()
_declared = re.compile(r"^\d+:\s.*?\b(\w+)\(")  # a library built with debug information
for line in gdb.execute("info functions -q " + os.environ["COLLTUNE_BREAK_LIST"],
                         to_string=True).splitlines():
    parts = line.split()
    name, addr = None, None
    if len(parts) == 2 and parts[0].startswith("0x"):
        name, addr = parts[1], int(parts[0], 16)
    elif (m := _declared.match(line)):  # "43:	ucc_status_t f(...);": no address listed
        name = m.group(1)
        try:
            addr = int(gdb.parse_and_eval("(long)&" + name))
        except gdb.error:
            continue
    # the library's functions only (the kernel's own helpers live in the executable)
    if name and addr is not None and _want.search(name) and gdb.solib_name(addr):
        _names.add(name)
for n in sorted(_names):
    _Count(n, internal=True)
gdb.execute("delete")
gdb.execute("continue")
end
