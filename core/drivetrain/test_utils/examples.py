"""``accelerate.test_utils.examples``: checks that a "complete" example script has every feature
of the ``examples/by_feature`` scripts.

Each script is reduced to one function (``training_function`` or ``main``) without comments
and blank lines; what the template ``examples/nlp_example.py`` already has is left out, and
:func:`compare_against_test` returns the feature script's remaining lines that the complete
script lacks (an empty list when it has them all).
"""

from __future__ import annotations

import os
from typing import Optional

_FUNCTIONS = {"training_function": "def main", "main": "if __name__"}  # a function -> what follows it
_DATALOADER_LINE = "train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)\n"
_MOCKED = "TESTING_MOCKED_DATALOADERS"


def get_function_contents_by_name(lines: list[str], name: str) -> list[str] | None:
    """The lines of function ``name`` (``training_function`` or ``main``) in ``lines``, up to
    what follows it in an example script; ``None`` when the function ends the file."""
    if name not in _FUNCTIONS:
        raise ValueError(f"Incorrect function name passed: {name}, choose either 'main' or 'training_function'")
    start = next((index for index, line in enumerate(lines) if f"def {name}" in line), None)
    if start is None:
        return None
    for index in range(start + 1, len(lines)):
        if _FUNCTIONS[name] in lines[index]:
            return lines[start:index]
    return None


def clean_lines(lines: list[str]) -> list[str]:
    """``lines`` without comment lines and empty lines."""
    return [line for line in lines if line != "\n" and not line.lstrip().startswith("#")]


def _read(path: str | os.PathLike) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return handle.readlines()


def _new_lines(lines: list[str], template: list[str], skip_after_mock: bool) -> list[str]:
    """Lines of ``lines`` that the template has not, the data loader line and mocked-loader blocks left out."""
    new: list[str] = []
    skip_next = False
    for line in lines:
        if skip_next:
            skip_next = False
            continue
        if line in template or line.lstrip() == _DATALOADER_LINE:
            continue
        if _MOCKED in line:
            skip_next = skip_after_mock  # the statement that shortens the run under test
            continue
        new.append(line)
    return new


def compare_against_test(base_filename: str, feature_filename: str, parser_only: bool,
                         secondary_filename: Optional[str] = None) -> list[str]:
    """The lines of ``feature_filename``'s new code that ``base_filename`` does not have.

    Args:
        base_filename: a "complete" example (``examples/complete_nlp_example.py``).
        feature_filename: a feature example whose additions the complete one must contain.
        parser_only: compare the ``main()`` functions (the argument parsers) instead of the
            ``training_function``s.
        secondary_filename: the template of ``base_filename`` when it is not
            ``examples/nlp_example.py`` (``examples/cv_example.py``).
    """
    name = "main" if parser_only else "training_function"
    template_file = _read(os.path.abspath(os.path.join("examples", "nlp_example.py")))
    template = clean_lines(get_function_contents_by_name(template_file, name) or [])
    feature = clean_lines(get_function_contents_by_name(_read(feature_filename), name) or [])
    complete = clean_lines(get_function_contents_by_name(_read(base_filename), name) or [])
    # The last line of the feature function is its return or last call: left out as the template has it too.
    added = _new_lines(feature[:-1], template, skip_after_mock=True)
    in_complete = set(_new_lines(complete, template, skip_after_mock=False))
    missing = [line for line in added if line not in in_complete]
    if secondary_filename is not None:
        secondary = set(clean_lines(get_function_contents_by_name(_read(secondary_filename), name) or []))
        template_only = {line for line in template_file if line not in secondary}
        missing = [line for line in missing if line not in template_only]
    return missing
