# barrier/: see README.md in this folder.
