"""kube-acc's native code: the share-limit library (``sharelimit.c``) preloaded into the
containers of a GPU share, the CDI hook (``cdihook.c``), the conformance kit's CUDA smoke
program (``cudasmoke.c``), and the stand-in CUDA driver the tests run them against
(``stubcuda.c``). :mod:`kubeacc.native.build` compiles them with the system's C compiler."""
