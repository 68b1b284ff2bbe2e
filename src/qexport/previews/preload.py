"""The first module the forkserver of preview processes imports (processes.py PRELOAD, then
qexport.bootstrap, which builds their sources), before it forks any; nothing else imports
it. Each preview process then starts with qexport loaded, in milliseconds.

Arrow's allocations go to the system allocator first: pyarrow's default, mimalloc, reserves
1 GiB of writable memory on its first allocation (which importing qexport's writers makes),
and that reservation would count against every preview process's RLIMIT_DATA (1.25 GiB of
data after these imports with it, 200 MiB without).
"""

import pyarrow

pyarrow.set_memory_pool(pyarrow.system_memory_pool())

import qexport.previews.child  # noqa: E402, F401 - after the allocator is chosen; loaded to be inherited
