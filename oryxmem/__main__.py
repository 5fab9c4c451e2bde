from oryxmem.cli import main

main()
