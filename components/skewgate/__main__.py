from skewgate.cli import entry

entry()
