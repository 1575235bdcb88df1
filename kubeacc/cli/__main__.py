"""``python -m kubeacc.cli``: the same as the ``kubeacc`` command."""

from kubeacc.cli.entry import main

main()
