# proto/: see README.md in this folder.
