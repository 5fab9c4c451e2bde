"""python -m bench: every benchmark in bench/, one table each (--json is not shared here)."""

from bench import socket_bench, store_bench, sync_bench

store_bench.main([])
sync_bench.main([])
socket_bench.main([])
