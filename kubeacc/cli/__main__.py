"""``python -m kubeacc.cli``: the same as the ``kubeacc`` command."""

from kubeacc.cli.main import main

main()
