"""Models in and out of other toolkits' formats: Hugging Face Marian (marian.py), CTranslate2
(ct2.py), with the exact re-layouts they need (layout.py)."""


class ConversionError(ValueError):
    """A model cannot be converted; the message names the file and every field at fault."""
