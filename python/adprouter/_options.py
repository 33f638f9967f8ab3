"""Router options as the text the library parses.

The binding formats, the library alone parses (router.ParseOptions), so
both layers read an option the same way: Router(**options) turns each
value into the text written here and the library accepts or refuses it.
"""

from ._errors import CONFIG, ConfigError


def option_text(key, value):
    """The text the library parses for option key."""
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode()  # round-trips exactly; inf and nan are refused by the library
    if isinstance(value, str):
        if "\0" in value:
            raise ConfigError("option %s = %r contains a NUL character" % (key, value), CONFIG)
        try:
            return value.encode()
        except UnicodeError as e:
            raise ConfigError("option %s = %r: %s" % (key, value, e), CONFIG) from None
    raise ConfigError("option %s = %r: want a str, int, float or bool, not %s"
                      % (key, value, type(value).__name__), CONFIG)
