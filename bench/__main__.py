"""python -m bench: every benchmark in bench/, one table each."""

from bench import store_bench, sync_bench

store_bench.main([])
sync_bench.main([])
