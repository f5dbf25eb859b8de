# kernels/: see README.md in this folder.
