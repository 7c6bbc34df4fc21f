""":class:`JsonConfig`, the one serialisation API of the package's configuration dataclasses: ``to_dict``/
``from_dict`` (unknown fields are refused by name) and ``save_json``/``load_json`` (errors name the file)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar, Dict, Optional, Tuple, Type, TypeVar

from .errors import PathLike
from .files import read_json, write_json

C = TypeVar("C", bound="JsonConfig")


class JsonConfig:
    """Mixin for frozen dataclasses: one way to turn settings into JSON and back.

    >>> @dataclasses.dataclass(frozen=True)
    ... class Settings(JsonConfig):
    ...     k: int = 10
    >>> Settings.from_dict({"k": 3})
    Settings(k=3)
    >>> Settings.from_dict({"k": 3, "kk": 4})
    Traceback (most recent call last):
    ...
    ValueError: unknown Settings field(s) ['kk']; known fields are ['k']
    """

    #: fields left out of :meth:`to_dict` while they hold their default: a field added later whose default must
    #: leave the JSON (and so the files and digests) written before it unchanged
    OMITTED_AT_DEFAULT: ClassVar[Tuple[str, ...]] = ()

    def to_dict(self) -> Dict[str, Any]:
        """The fields as a dict, without those of :attr:`OMITTED_AT_DEFAULT` that hold their default.

        >>> @dataclasses.dataclass(frozen=True)
        ... class Settings(JsonConfig):
        ...     OMITTED_AT_DEFAULT = ("extra", "count")
        ...     k: int = 10
        ...     extra: float = 0.0
        ...     count: Optional[int] = None
        >>> Settings().to_dict(), Settings(extra=0.5, count=0).to_dict()
        ({'k': 10}, {'k': 10, 'extra': 0.5, 'count': 0})
        """
        # JsonConfig is mixed into frozen dataclasses, but is not one itself as far as mypy sees
        values: Dict[str, Any] = dataclasses.asdict(self)  # type: ignore[call-overload]
        if self.OMITTED_AT_DEFAULT:
            defaults = {f.name: f.default for f in dataclasses.fields(self)}  # type: ignore[arg-type]
            for name in self.OMITTED_AT_DEFAULT:
                if values[name] == defaults[name]:
                    del values[name]
        return values

    def settings_digest(self) -> str:
        """A short hash of the settings (their sorted JSON): a cache name that changes whenever they do.

        >>> @dataclasses.dataclass(frozen=True)
        ... class Settings(JsonConfig):
        ...     k: int = 10
        >>> Settings().settings_digest() == Settings(k=10).settings_digest() != Settings(k=11).settings_digest()
        True
        """
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls: Type[C], values: Dict[str, Any], source: Optional[PathLike] = None) -> C:
        where = f"{source}: " if source is not None else ""
        if not isinstance(values, dict):
            raise ValueError(f"{where}expected a JSON object of {cls.__name__} settings, got {type(values).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  # cls is a dataclass (as above)
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"{where}unknown {cls.__name__} field(s) {unknown}; known fields are {sorted(known)}")
        try:
            return cls(**values)
        except (TypeError, ValueError) as err:
            if source is None:
                raise
            raise ValueError(f"{where}{err}") from None

    def save_json(self, path: PathLike) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load_json(cls: Type[C], path: PathLike) -> C:
        return cls.from_dict(read_json(path, f"{cls.__name__} file"), source=path)
