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
  stock path otherwise. Whether that holds is worked out once per (event,
  source) and forgotten when a callback or a transition is added by any of
  ``transitions``' ways to add one (its properties and ``add_callback``
  methods; a callback list changed in place is not seen).

Both rely on ``transitions`` internals (``Event.transitions``, the callback
lists), so the dependency has an upper version bound.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from transitions import Event, Machine, MachineError, State, Transition
from transitions.core import listify

from ._errors import AgentfsmError

__all__ = ["LeanEvent", "Refused", "SharedMachine"]


class Refused(MachineError, AgentfsmError, KeyError):
    """``transitions``' refusal of a trigger, also a ``KeyError``: the engine catches
    it as one (and raises ``IllegalTransitionError``), so importing the engine does not
    load ``transitions``."""


class _Callbacks:
    """How many callbacks were ever added to a shared machine, its states or transitions.

    A lean event's destinations hold for one count: adding a callback anywhere
    makes every event work them out again (rare: callbacks are for debugging).
    """

    added = 0


def _callback_added() -> None:
    _Callbacks.added += 1


class _State(State):
    """A state whose ``add_callback`` (``on_enter_<state>`` too) tells the lean events."""

    def add_callback(self, trigger: str, func: Any) -> None:
        super().add_callback(trigger, func)
        _callback_added()


class _Transition(Transition):
    """A transition whose ``add_callback`` tells the lean events."""

    def add_callback(self, trigger: str, func: Any) -> None:
        super().add_callback(trigger, func)
        _callback_added()


class LeanEvent(Event):
    """An event that, when nothing hooks into it, just sets the model's state.

    The shortcut is taken only when the trigger has no arguments, the machine
    has no queue and no machine-wide callbacks, the model's state has exactly
    one transition for this event, and neither that transition nor its two
    states have a callback, a condition or a final flag. Then the stock path
    would do nothing but the assignment. Anything else (an invalid trigger
    included) takes :meth:`transitions.Event.trigger`, so errors, callbacks and
    ``ignore_invalid_triggers`` behave exactly as in ``transitions``.

    Whether the shortcut applies, and where it leads, depends only on the
    source state and the machine's callbacks, so it is worked out once per
    source and kept until a callback or a transition is added.
    """

    def __init__(self, name: str, machine: Machine) -> None:
        super().__init__(name, machine)
        # The machine's own attributes, read live: ``Machine.__getattr__`` makes
        # every attribute access on a machine slow, a dict lookup is not.
        self._machine_vars: dict[str, Any] = vars(machine)
        #: ``{source: destination}``, None where the stock path must run; valid while
        #: no callback is added (``_callbacks_seen``).
        self._destinations: dict[str, str | None] = {}
        self._callbacks_seen = _Callbacks.added

    def add_transition(self, transition: Transition) -> None:
        super().add_transition(transition)
        self._destinations.clear()

    def trigger(self, model: object, *args: Any, **kwargs: Any) -> bool:
        if args or kwargs:
            return bool(super().trigger(model, *args, **kwargs))
        return self.fire(model)

    def fire(self, model: object) -> bool:
        """``trigger(model)``, without the cost of variable arguments (a run's every move)."""
        if self._callbacks_seen != _Callbacks.added:
            self._destinations.clear()
            self._callbacks_seen = _Callbacks.added
        source = model.state  # type: ignore[attr-defined]  # a shared machine's runs' attribute
        try:
            dest = self._destinations[source]
        except KeyError:
            dest = self._destinations[source] = self._lean_destination(source)
        if dest is None:
            try:
                return bool(super().trigger(model))
            except MachineError as exc:
                raise Refused(exc.value) from None
        model.state = dest  # type: ignore[attr-defined]
        return True

    def _lean_destination(self, source: str) -> str | None:
        """Where this event takes a model in ``source`` when the stock path would do
        nothing but the assignment; None when it would do more (or raise)."""
        machine = self._machine_vars
        if (
            machine["_queued"]
            or machine["_prepare_event"]
            or machine["_finalize_event"]
            or machine["_on_exception"]
            or machine["_before_state_change"]
            or machine["_after_state_change"]
        ):
            return None
        candidates = self.transitions.get(source)
        if candidates is None or len(candidates) != 1:
            return None
        transition = candidates[0]
        states = machine["states"]
        dest = states.get(transition.dest)
        if dest is None or (
            dest.on_enter
            or dest.final
            or states[transition.source].on_exit
            or transition.prepare
            or transition.conditions
            or transition.before
            or transition.after
        ):
            return None
        value: str = dest.value
        return value


def _telling(name: str) -> property:
    """``Machine``'s property ``name`` (machine-wide callbacks), telling the lean events
    when it is set."""
    stock: property = getattr(Machine, name)

    def set_callbacks(machine: Machine, value: Any) -> None:
        stock.__set__(machine, value)
        _callback_added()

    return property(stock.fget, set_callbacks)


class SharedMachine(Machine):
    """A machine shared by many runs: weakly held, O(1) to join and leave, nothing bound.

    Runs fire events through the machine (``machine.events[name].trigger(run)``),
    so the per-model conveniences ``transitions`` would attach (``is_<state>``,
    one method per trigger) are left out: they cost time and memory per run
    and would clash with a model's own names. ``dispatch`` needs them and is
    not available.
    """

    event_cls = LeanEvent
    state_cls = _State
    transition_cls = _Transition
    prepare_event = _telling("prepare_event")
    before_state_change = _telling("before_state_change")
    after_state_change = _telling("after_state_change")
    finalize_event = _telling("finalize_event")
    on_exception = _telling("on_exception")

    def __init__(self, **kwargs: Any) -> None:
        if kwargs.get("model_attribute", "state") != "state":
            # The lean events read and set ``state`` itself, not an attribute by name.
            raise ValueError("a shared machine keeps its runs' state in their `state`")
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

    def add_states(self, states: Any, *args: Any, **kwargs: Any) -> None:
        """``Machine.add_states``; a state added (or replaced) may bring callbacks."""
        super().add_states(states, *args, **kwargs)
        _callback_added()

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
