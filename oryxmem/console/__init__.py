"""The console: every agent's memory in a browser (docs/console.md).

A process of its own on 127.0.0.1 that reaches the memory as the CLI does (through the
daemon's socket; with no daemon, the stores directly and read-only) and serves
server-rendered pages, guarded as a page on a shared machine must be (guard.py).
Nothing here is imported until ``oryxmem console`` runs.
"""
