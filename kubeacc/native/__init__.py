"""kube-acc's native code: the share-limit library (``sharelimit.c``) preloaded into the
containers of a GPU share, and the stand-in CUDA driver its tests run it against
(``stubcuda.c``). :mod:`kubeacc.native.build` compiles them with the system's C compiler."""
