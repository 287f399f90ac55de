"""The lab's error type: anything that stops a lab from being built, entered or used."""

from __future__ import annotations

from netkit.errors import NetkitError


class LabError(NetkitError):
    """The lab could not be built, entered or used (the message names the namespace and step)."""
