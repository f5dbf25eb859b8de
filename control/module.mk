# control/: see README.md in this folder.
