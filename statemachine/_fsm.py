"""The glue to ``transitions``: one shared machine per table, many runs, lean triggers.

Every run is a model of its table's one :class:`SharedMachine`, and every move
is a real trigger of that machine's events. Two things of stock ``transitions``
do not scale to many runs, and this module replaces them:

* ``Machine.models`` is a list, checked with ``in`` on every ``add_model`` and
  searched by ``remove_model``: starting N runs costs O(N^2), and a run that
  is never finished stays listed forever. Here it is a :class:`weakref.WeakSet`:
  registering and removing a run are O(1), and a run nobody holds any more
  drops out by itself.
* ``Event.trigger`` builds an ``EventData``, a ``partial`` and runs the prepare,
  finalize and exception machinery with debug logging around each phase, even
  when nothing hooks into them. :class:`LeanEvent` moves a model straight to
  the destination when nothing could observe the difference, and takes the
  stock path otherwise.

Both rely on ``transitions`` internals (``Event.transitions``, the callback
lists), so the dependency has an upper version bound.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from transitions import Event, Machine
from transitions.core import listify

__all__ = ["LeanEvent", "SharedMachine"]


class LeanEvent(Event):
    """An event that, when nothing hooks into it, just sets the model's state.

    The shortcut is taken only when the trigger has no arguments, the machine
    has no queue and no machine-wide callbacks, the model's state has exactly
    one transition for this event, and neither that transition nor its two
    states have a callback, a condition or a final flag. Then the stock path
    would do nothing but the assignment. Anything else (an invalid trigger
    included) takes :meth:`transitions.Event.trigger`, so errors, callbacks and
    ``ignore_invalid_triggers`` behave exactly as in ``transitions``.
    """

    def __init__(self, name: str, machine: Machine) -> None:
        super().__init__(name, machine)
        # The machine's own attributes, read live: ``Machine.__getattr__`` makes
        # every attribute access on a machine slow, a dict lookup is not.
        self._machine_vars: dict[str, Any] = vars(machine)

    def trigger(self, model: object, *args: Any, **kwargs: Any) -> bool:
        if args or kwargs:
            return bool(super().trigger(model, *args, **kwargs))
        return self.fire(model)

    def fire(self, model: object) -> bool:
        """``trigger(model)``, without the cost of variable arguments (a run's every move)."""
        machine = self._machine_vars
        if not (
            machine["_queued"]
            or machine["_prepare_event"]
            or machine["_finalize_event"]
            or machine["_on_exception"]
            or machine["_before_state_change"]
            or machine["_after_state_change"]
        ):
            attribute = machine["model_attribute"]
            candidates = self.transitions.get(getattr(model, attribute))
            if candidates is not None and len(candidates) == 1:
                transition = candidates[0]
                states = machine["states"]
                dest = states.get(transition.dest)
                if dest is not None and not (
                    dest.on_enter
                    or dest.final
                    or states[transition.source].on_exit
                    or transition.prepare
                    or transition.conditions
                    or transition.before
                    or transition.after
                ):
                    setattr(model, attribute, dest._name)  # ``State.value``, without the property
                    return True
        return bool(super().trigger(model))


class SharedMachine(Machine):
    """A machine shared by many runs: weakly held, O(1) to join and leave, nothing bound.

    Runs fire events through the machine (``machine.events[name].trigger(run)``),
    so the per-model conveniences ``transitions`` would attach (``is_<state>``,
    one method per trigger) are left out: they cost time and memory per run
    and would clash with a model's own names. ``dispatch`` needs them and is
    not available.
    """

    event_cls = LeanEvent

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Models are held weakly: a run that is dropped unfinished leaves with it.
        self.models: weakref.WeakSet[Any] = weakref.WeakSet()  # type: ignore[assignment]

    def add_model(self, model: Any, initial: Any = None) -> None:
        """Register models at ``initial`` (required); nothing is bound onto them."""
        initial = initial if initial is not None else self.initial
        if initial is None:
            raise ValueError("A run needs an initial state: the table's entries name them.")
        value = self.get_state(initial).value  # an unknown state is refused as set_state would
        attribute = self.model_attribute
        models = self.models
        for run in listify(model):
            if run not in models:
                setattr(run, attribute, value)  # what ``set_state`` does, minus its dispatch
                models.add(run)

    def remove_model(self, model: Any) -> None:
        """Forget models; forgetting one that is not registered is not an error."""
        for run in listify(model):
            self.models.discard(run)

    @property
    def model(self) -> object | list[object]:
        models: Iterable[object] = self.models
        listed = list(models)
        return listed[0] if len(listed) == 1 else listed

    def _add_model_to_state(self, state: Any, model: object) -> None:
        return None

    def _add_trigger_to_model(self, trigger: str, model: object) -> None:
        return None
