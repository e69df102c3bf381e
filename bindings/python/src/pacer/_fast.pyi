# The C extension with the hot call (src/pacer/_fast.c); private but for
# Ticket, which the package exports as pacer.Ticket.
from typing import Any, final

class Core:
    def reserve(self, now_ms: int) -> Any: ...
    def _bind(self, owner: object, storage: int, reserve: int, /) -> None: ...

@final
class Ticket:
    """The right to refund one admission's debit; released at most once, by
    the pacer that issued it. Made by ``reserve``, not by hand."""

    _pacer: Any
    _seq: int
    _debit_units: int
    _owner: int
    _spent: bool
    def __init__(self, pacer: Any, seq: int, debit_units: int, owner: int) -> None: ...
    @property
    def debit_units(self) -> int:
        """The debit this ticket refunds, in 1/60000 of a connection."""
    @property
    def spent(self) -> bool:
        """Whether it was released already."""

def setup(admitted: type, refused: type, paths: dict[int, Any], pacer_error: Any, check_u64: Any,
          reading_ms: Any, /) -> None: ...
def clock_ms(clock: Any, /) -> int: ...
def noop() -> None: ...
