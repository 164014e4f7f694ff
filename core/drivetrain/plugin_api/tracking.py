"""The base classes of a tracker plugin and the value conversions trackers share."""

from ..services.tracking import GeneralTracker, LibraryRunTracker, flatten_config, images_by_key, is_number, plain_value

__all__ = ["GeneralTracker", "LibraryRunTracker", "flatten_config", "images_by_key", "is_number", "plain_value"]
