"""A request body's fields, declared once per endpoint as a dataclass, and read against that declaration.

Each endpoint's reader declares the fields it takes (app/server/openai/chat_request.py, responses/request.py,
anthropic/messages.py): their JSON types, the ranges of numbers (the engine's own, where the field is one of its
options: app/protocol/option_fields.accepted) and what a missing field is. `read` checks a body against it, with the
one strict type check every shape uses (app/protocol/option_spec.fits: true is no number, 1.5 no integer, NaN in no
range), and says a wrong value in one sentence that names the field, in the dialect's envelope (edge/errors.py).
The names a declaration has are also what the field policy knows (edge/field_policy.py): any other is a field
Hearth has never heard of. What a value means beyond its type (a message's roles, a tool's schema) is the
reader's to check, field by field.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal, TypeVar

from app.protocol.option_spec import Range, fits, hints, required
from app.server.edge import field_policy
from app.server.edge.errors import invalid

MUST = "must"  # a field's metadata: what its value must be, where the type alone says it badly


def said(default: Any = None, must: str = "", *, required: bool = False):
    """A declared field: its default (None: the request may leave it out) and, for a value of the wrong type,
    what it must be (else said from its type). required: no default; leaving it out is a 400."""
    meta = {MUST: must} if must else {}
    return field(metadata=meta) if required else field(default=default, metadata=meta)


@dataclass(kw_only=True)
class Taken:
    """Fields that carry only metadata (OpenAI's and Anthropic's): taken, never changing the answer, and kept where
    the API keeps them (a stored response's metadata, user, store)."""

    metadata: Any = None
    user: Any = None
    safety_identifier: Any = None
    prompt_cache_key: Any = None
    prompt_cache_retention: Any = None
    service_tier: Any = None
    client_metadata: Any = None
    store: Any = None
    stream_options: Any = None


def known(shape: type) -> frozenset[str]:
    """The fields a shape declares: what its endpoint knows."""
    return frozenset(f.name for f in fields(shape))


Shape = TypeVar("Shape")


def read(shape: type[Shape], body: Any) -> Shape:
    """A body read against its endpoint's shape: an object, its unknown fields taken under the field policy, each
    declared field of its declared type (null is a value: only a field whose type allows None takes it)."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    field_policy.check(body, known(shape))
    declared = hints(shape)
    given = {}
    for f in fields(shape):
        if f.name not in body:
            if required(f):
                must = f.metadata.get(MUST) or described(declared[f.name])
                raise invalid(f"'{f.name}' is required: {must}.", f.name)
            continue
        value = body[f.name]
        if not fits(declared[f.name], value):
            must = f.metadata.get(MUST) or described(declared[f.name])
            raise invalid(f"'{f.name}' must be {must}; got {shown(value)}.", f.name)
        given[f.name] = value
    return shape(**given)


def described(kind: Any) -> str:
    """What a declared type asks for, in words: 'a number between 0 and 2', 'true or false', 'a string'."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        bounds = [a for a in args[1:] if isinstance(a, Range)]
        return described(args[0]) + "".join(f" between {b.low:g} and {b.high:g}" for b in bounds)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(described(a) for a in args if a is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is list or kind is list:
        return "a list of strings" if args == (str,) else "a list"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, "an object")


def shown(value: Any) -> str:
    """A wrong value as an error says it: a short one as sent, a long one or a container by its kind (a hostile
    body's megabytes never go into a sentence)."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
