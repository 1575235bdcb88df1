"""``kubeacc claim``: a ResourceClaim (or template) for "H100, else A100, else KunLun R200"."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
import yaml

from kubeacc.cli.errors import fail
from kubeacc.cli.options import UnitsTableOption, use_units_table
from kubeacc.cli.typerize import typer_command


@typer_command
def claim_command(
    name: Annotated[str, typer.Argument(help="Name of the claim (or template).")],
    prefer: Annotated[
        str,
        typer.Option(
            "--prefer", help="Models, most wanted first: 'H100,A100,KunLun R200' ('*' last: any)."
        ),
    ],
    count: Annotated[
        int | None, typer.Option(min=1, help="Devices of the chosen model (default 1).")
    ] = None,
    units: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Normalized units instead of a count: per model, as many "
            "devices as the unit table says add up to them.",
        ),
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="metadata.namespace")] = None,
    template: Annotated[
        bool, typer.Option(help="A ResourceClaimTemplate (for pods' resourceClaims).")
    ] = False,
    units_table: UnitsTableOption = None,
) -> None:
    """Print a DRA claim whose firstAvailable subrequests are the models in order."""
    from kubeacc.units.claims import ClaimSpecError, preference_claim
    from kubeacc.units.prefer import PreferenceError

    if count is not None and units is not None:
        fail("--count and --units ask the same thing two ways: give one of them")
    use_units_table(units_table)
    try:
        doc = preference_claim(
            name, prefer, count=count or 1, units=units, namespace=namespace, template=template
        )
    except (ClaimSpecError, PreferenceError) as err:
        fail(str(err))
    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
