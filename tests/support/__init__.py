"""What the tests share: the daemon as a subprocess, sync helpers, loopback servers,
the soak model, and running oryxmem as a user does."""
