"""Backends that answer reads from derived data (docs/design.md §4): every save lands in
MEMORY.md first (oryxmem/service.py); these are mirrors of it, registered in
oryxmem/registry.py. The markdown backend is the file store itself (store/markdown.py).
"""
