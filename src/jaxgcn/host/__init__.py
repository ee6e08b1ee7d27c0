"""The machine jaxgcn runs on: its memory and CPUs, the cache directories, XLA's compilation
cache and Ctrl-C. Imports nothing else of jaxgcn."""
