"""Models in and out of other toolkits' formats: Hugging Face Marian (marian.py), CTranslate2
(ct2.py), with the exact re-layouts they need (layout.py)."""


class ConversionError(ValueError):
    """A model cannot be converted; the message names the file and every field at fault."""


# CTranslate2 exports (ct2.py), here where the command line reads them without torch:
OURS_FILE = "transformer_mt.json"  # our model and decoding config beside CTranslate2's files
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_bfloat16", "int16", "bfloat16",
                 "float16", "int8_float16")
