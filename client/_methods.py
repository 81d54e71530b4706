"""The methods of the clients and their handles, listed once for the sync and the async client.

Each method is an operation of ``client._operations`` or ``client._loops``, bound by a
descriptor: on a class of the sync client (a ``Blocking``) the method runs the operation and
returns its result; on one of the async client (an ``Awaiting``) it returns a coroutine. The
clients run the operations (``_run``), iterate over listings (``_list``) and wrap a new study
or sampler in its handle (``_open``); on a class, a method is its operation, with its signature
and docstring.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from inspect import Signature
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import httpx

from client import _artifact_operations as artifact_ops
from client import _dataset_operations as dataset_ops
from client import _loops
from client import _operations as ops
from client import _sampler_operations as sampler_ops
from client._base import DEFAULT_BASE_URL, DEFAULT_RETRIES, DEFAULT_TIMEOUT, Call
from client._operations import Op, Pages
from client.errors import ClientClosed
from client.models import SamplerPublic, StudyPublic

if TYPE_CHECKING:
    from client._async import AsyncSampler, AsyncStudy
    from client._sync import Sampler, Study

P = ParamSpec("P")
T = TypeVar("T")
Coro = Coroutine[Any, Any, T]


class Blocking:
    """A class of the sync client: its methods return what their operations return."""


class Awaiting:
    """A class of the async client: its methods return coroutines."""


class _Binding:
    """An operation bound as a method: the operation is called with the object and the
    method's arguments, and what it returns goes to the object's hook named ``_perform``."""

    _perform = "_run"

    def __init__(self, op: Callable[..., Any]) -> None:
        self.op = op
        # The method's signature: the operation's, without the object it is bound to.
        signature = inspect.signature(op)
        arguments = list(signature.parameters.values())[1:]
        self.signature = signature.replace(parameters=arguments, return_annotation=Signature.empty)

    def _bind(self, obj: Any) -> Callable[..., Any]:
        op, perform = self.op, getattr(obj, self._perform)

        @functools.wraps(op)
        def method(*args: Any, **kwargs: Any) -> Any:
            return perform(op(obj, *args, **kwargs))

        method.__signature__ = self.signature  # type: ignore[attr-defined]  # read by inspect
        return method


class Method(_Binding, Generic[P, T]):
    """An operation as a method."""

    def __init__(self, op: Callable[Concatenate[Any, P], Op[T]]) -> None:
        super().__init__(op)

    @overload
    def __get__(self, obj: None, owner: type) -> Callable[Concatenate[Any, P], Op[T]]: ...
    @overload
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: Awaiting, owner: type) -> Callable[P, Coro[T]]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        return self.op if obj is None else self._bind(obj)


class Listing(_Binding, Generic[P, T]):
    """A listing as a method: an iterator (``async for`` with the async client) that fetches
    each page when it is due."""

    _perform = "_list"

    def __init__(self, op: Callable[Concatenate[Any, P], Pages[T]]) -> None:
        super().__init__(op)

    @overload
    def __get__(self, obj: None, owner: type) -> Callable[Concatenate[Any, P], Pages[T]]: ...
    @overload
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, Iterator[T]]: ...
    @overload
    def __get__(self, obj: Awaiting, owner: type) -> Callable[P, AsyncIterator[T]]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        return self.op if obj is None else self._bind(obj)


I = TypeVar("I", StudyPublic, SamplerPublic)  # noqa: E741 (the info a handle wraps)


class Opening(_Binding, Generic[P, I]):
    """A client's method that returns a study's or a sampler's handle."""

    _perform = "_open"

    def __init__(self, op: Callable[Concatenate[Any, P], Op[I]]) -> None:
        super().__init__(op)

    @overload
    def __get__(
        self: Opening[P, StudyPublic], obj: Blocking, owner: type
    ) -> Callable[P, Study]: ...
    @overload
    def __get__(
        self: Opening[P, SamplerPublic], obj: Blocking, owner: type
    ) -> Callable[P, Sampler]: ...
    @overload
    def __get__(
        self: Opening[P, StudyPublic], obj: Awaiting, owner: type
    ) -> Callable[P, Coro[AsyncStudy]]: ...
    @overload
    def __get__(
        self: Opening[P, SamplerPublic], obj: Awaiting, owner: type
    ) -> Callable[P, Coro[AsyncSampler]]: ...
    @overload
    def __get__(self, obj: None, owner: type) -> Callable[Concatenate[Any, P], Op[I]]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        return self.op if obj is None else self._bind(obj)


HttpT = TypeVar("HttpT", bound=httpx.Client | httpx.AsyncClient)
TransportT = TypeVar("TransportT", bound=httpx.BaseTransport | httpx.AsyncBaseTransport)


class ClientMethods(Generic[HttpT, TransportT]):
    """A connection to an asktell server, ``_http`` (an ``_http_class``), with the methods that
    create or fetch studies and samplers. ``api_key`` (default ``$ASKTELL_API_KEY``) is sent as
    ``Authorization: Bearer``; ``transport`` replaces httpx's (tests use the app's)."""

    _http_class: type[HttpT]

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        transport: TransportT | None = None,
    ) -> None:
        # A key given here wins; else the environment's (the CLI and job workers use it).
        api_key = os.environ.get("ASKTELL_API_KEY") if api_key is None else api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        options: dict[str, Any] = {"timeout": timeout, "headers": headers, "transport": transport}
        self._http = self._http_class(base_url=base_url, **options)
        self.retries = retries
        self._closed = False

    def _prepare(self, call: Call[Any]) -> httpx.Request:
        """The request that sends ``call``; refused once the client is closed."""
        if self._closed:
            raise ClientClosed(f"this {type(self).__name__} is closed; create a new one")
        return self._http.build_request(
            call.method,
            call.path,
            json=call.json,
            params=call.params,
            headers=call.headers,
            content=call.content,
        )

    create_study = Opening(ops.create_study)
    create_study_from = Opening(ops.create_study_from)
    get_study = Opening(ops.get_study)
    list_studies = Listing(ops.list_studies)
    engine_names = Method(ops.engine_names)
    import_study = Opening(ops.import_study)
    create_sampler = Opening(sampler_ops.create_sampler)
    get_sampler = Opening(sampler_ops.get_sampler)
    put_artifact = Method(artifact_ops.put_artifact)
    get_artifact = Method(artifact_ops.get_artifact)
    delete_artifact = Method(artifact_ops.delete_artifact)
    upload_dataset = Method(dataset_ops.upload_dataset)
    datasets = Method(dataset_ops.datasets)
    dataset = Method(dataset_ops.dataset)
    dataset_csv = Method(dataset_ops.dataset_csv)
    delete_dataset = Method(dataset_ops.delete_dataset)


InfoT = TypeVar("InfoT", StudyPublic, SamplerPublic)


class _Handle(Generic[InfoT]):
    """A study or a sampler on the server, ``info`` its state when last fetched; its client
    runs its methods."""

    #: The field of ``info`` that ``repr`` shows.
    _shown = "name"

    def __init__(self, client: Any, info: InfoT) -> None:
        self.client, self.id = client, info.id
        self.info: InfoT = info

    def __repr__(self) -> str:
        shown = getattr(self.info, self._shown)
        return f"{type(self).__name__}(id={self.id}, {self._shown}={shown!r})"

    def _run(self, op: Op[Any]) -> Any:
        return self.client._run(op)

    def _list(self, pages: Pages[Any]) -> Any:
        return self.client._list(pages)


class StudyMethods(_Handle[StudyPublic]):
    """The methods of ``Study`` and ``AsyncStudy``."""

    refresh = Method(ops.refresh)
    ask = Method(ops.ask)
    ask_units = Method(ops.ask_units)
    tell = Method(ops.tell)
    fail = Method(ops.fail)
    tell_and_ask = Method(ops.tell_and_ask)
    report = Method(ops.report)
    heartbeat = Method(ops.heartbeat)
    enqueue = Method(ops.enqueue)
    trial = Method(ops.trial)
    trials = Listing(ops.trials)
    measurements = Method(ops.measurements)
    set_note = Method(ops.set_note)
    history = Method(ops.history)
    pareto = Method(ops.pareto)
    curves = Method(ops.curves)
    best = Method(ops.best)
    engine_panel = Method(ops.engine_panel)
    importance = Method(ops.importance)
    lineage = Method(ops.lineage)
    best_schedule = Method(ops.best_schedule)
    checkpoints = Method(ops.checkpoints)
    population = Method(ops.population)
    export = Method(ops.export)
    export_csv = Method(ops.export_csv)
    update = Method(ops.update)
    delete = Method(ops.delete)
    optimize = Method(_loops.optimize)
    train = Method(_loops.train)


class SamplerMethods(_Handle[SamplerPublic]):
    """The methods of ``Sampler`` and ``AsyncSampler``."""

    _shown = "iteration"
    refresh = Method(sampler_ops.refresh_sampler)
    ask = Method(sampler_ops.ask_sampler)
    tell = Method(sampler_ops.tell_sampler)
    run = Method(sampler_ops.run_sampler)
    delete = Method(sampler_ops.delete_sampler)
