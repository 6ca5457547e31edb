"""Labelled bracket scoring of parse trees as EVALB scores them (Sekine & Collins 1997; the
2006 version, with F-measure), for the paper's §6.3 parsing experiment.

Each line of a gold and a test file is one bracketed tree. As EVALB does: pre-terminals whose
tag is a deleted label (COLLINS.prm: -NONE- and the punctuation tags , : `` '' .) are dropped
with their words; brackets with a deleted label (TOP) are not counted, nor those left spanning
nothing; function tags are cut from labels ("NP-SBJ-1" is "NP"); equivalent labels (ADVP and
PRT) and words match each other. A test bracket matches at most one gold bracket of the same
span and label; a test bracket crossing any gold one counts one crossing. A sentence whose test
line is empty is skipped (status 2), one whose words differ from the gold's is an error
(status 1): EVALB leaves both out of its totals, which can hide broken outputs, so
`summary(strict=True)` also scores them (no bracket matched, every gold bracket missed).
With QUOTE_LABEL (nk.prm) a quote term deleted on one side but not the other is put back
before the lengths are compared, as EVALB's 2006 fix does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

COLLINS_DELETE = ("TOP", "-NONE-", ",", ":", "``", "''", ".")
QUOTE_WORDS = ("'", '"', "/")  # the words a QUOTE_LABEL term may have (EVALB's is_quote_term)


@dataclass(frozen=True)
class EvalbParams:
    """EVALB's parameter file; the defaults are COLLINS.prm's."""

    labeled: bool = True
    delete_labels: frozenset[str] = frozenset(COLLINS_DELETE)
    delete_labels_for_length: frozenset[str] = frozenset({"-NONE-"})
    eq_labels: frozenset[frozenset[str]] = frozenset({frozenset({"ADVP", "PRT"})})
    eq_words: frozenset[frozenset[str]] = frozenset()
    cutoff_len: int = 40
    quote_labels: frozenset[str] = frozenset()  # nk.prm's QUOTE_LABEL; COLLINS.prm has none

    @classmethod
    def read(cls, path: Path) -> EvalbParams:
        """A .prm file (DEBUG and MAX_ERROR are read and ignored: nothing stops early)."""
        values: dict[str, list[str]] = {}
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            line = line.strip()
            if line.startswith("#") or len(line) < 3:
                continue
            key, _, value = line.partition(" ")
            known = {"DEBUG", "MAX_ERROR", "CUTOFF_LEN", "LABELED", "DELETE_LABEL",
                     "DELETE_LABEL_FOR_LENGTH", "EQ_LABEL", "EQ_WORD", "QUOTE_LABEL"}
            if key not in known:
                raise ValueError(f"{path}:{number}: {key} is not supported (known: "
                                 f"{', '.join(sorted(known))})")
            values.setdefault(key, []).append(value.strip())

        def pairs(key: str) -> frozenset[frozenset[str]]:
            return frozenset(frozenset(v.split()) for v in values.get(key, []))

        return cls(labeled=int(values.get("LABELED", ["1"])[-1]) == 1,
                   delete_labels=frozenset(values.get("DELETE_LABEL", [])),
                   delete_labels_for_length=frozenset(values.get("DELETE_LABEL_FOR_LENGTH",
                                                                 [])),
                   eq_labels=pairs("EQ_LABEL"), eq_words=pairs("EQ_WORD"),
                   cutoff_len=int(values.get("CUTOFF_LEN", ["40"])[-1]),
                   quote_labels=frozenset(values.get("QUOTE_LABEL", [])))

    def same_label(self, a: str, b: str) -> bool:
        return a == b or frozenset({a, b}) in self.eq_labels

    def same_word(self, a: str, b: str) -> bool:
        return a == b or frozenset({a, b}) in self.eq_words


# nk.prm (EVALB's new.prm with MAX_ERROR raised): also S1, ? and ! deleted, and quote repair
NK = EvalbParams(delete_labels=frozenset(COLLINS_DELETE + ("S1", "?", "!")),
                 quote_labels=frozenset({"``", "''", "POS", "NN", "CD", "VBZ", ":"}))
BUILT_IN = {"collins": EvalbParams(), "nk": NK}


def evalb_params(name_or_path: str) -> EvalbParams:
    """A built-in parameter set (collins, nk) or a .prm file."""
    return BUILT_IN[name_or_path] if name_or_path in BUILT_IN else \
        EvalbParams.read(Path(name_or_path))


class BracketError(ValueError):
    """A line that is not a well-formed bracketed tree."""


@dataclass
class Quote:
    """A pre-terminal that QUOTE_LABEL names (a quote or possessive mark), where it stood: its
    word position, the brackets opened before it and those open around it (EVALB's
    s_term_ind)."""

    tag: str
    word: str
    index: int
    opened_before: int
    open_around: list[int]


@dataclass
class Bracketing:
    """One tree as EVALB reads it: its words and tags (deleted pre-terminals dropped), every
    bracket as [label, start, end] in the order they open, its quote terms and its length for
    the cutoff. `brackets(params)` are the ones that count."""

    words: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    raw: list[list] = field(default_factory=list)
    quotes: list[Quote] = field(default_factory=list)
    length: int = 0

    def brackets(self, params: EvalbParams) -> list[tuple[str, int, int]]:
        """Function tags cut, brackets spanning nothing or with a deleted label left out."""
        found = []
        for label, start, end in self.raw:
            label = re.split(r"[-=]", label, maxsplit=1)[0]
            if start < end and not any(params.same_label(label, d)
                                       for d in params.delete_labels):
                found.append((label, start, end))
        return found

    def reinsert(self, quote: Quote) -> None:
        """Put a deleted quote term back where it stood (EVALB's reinsert_term)."""
        self.words.insert(quote.index, quote.word)
        self.tags.insert(quote.index, quote.tag)
        for k, bracket in enumerate(self.raw):
            if k >= quote.opened_before:
                bracket[1] += 1
                bracket[2] += 1
        for k in quote.open_around:
            self.raw[k][2] += 1


def _name(line: str, i: int) -> tuple[str, int]:
    """The label or word starting at i (up to a space or bracket) and the index after it."""
    j = i
    while j < len(line) and not line[j].isspace() and line[j] not in "()":
        j += 1
    return line[i:j], j


def read_bracketing(line: str, params: EvalbParams) -> Bracketing:
    """Parse one bracketed tree (or several side by side), character by character as EVALB's
    read_line does: "(LABEL word)" is a pre-terminal only where a space follows the label
    ("(X )" is one with an empty word, "(X)" a bracket spanning nothing)."""
    out, stack = Bracketing(), []
    i = 0
    while i < len(line):
        c = line[i]
        if c.isspace():
            i += 1
        elif c == "(":
            label, i = _name(line, i + 1)
            if i < len(line) and line[i].isspace():
                q = i
                while q < len(line) and line[q].isspace():
                    q += 1
                word, q = _name(line, q)
                if q < len(line) and line[q] == ")":  # a pre-terminal: (TAG word)
                    _terminal(out, label, word, stack, params)
                    i = q + 1
                    continue
                if q < len(line) and line[q] != "(":
                    raise BracketError(f"more than two elements in ({label} {word} ...")
            stack.append(len(out.raw))
            out.raw.append([label, len(out.words), None])
        elif c == ")":
            if not stack:
                raise BracketError("unbalanced: too many closing brackets")
            out.raw[stack.pop()][2] = len(out.words)
            i += 1
        else:
            raise BracketError(f"a word outside brackets: {_name(line, i)[0]!r}")
    if stack:
        raise BracketError("unbalanced: too many opening brackets")
    return out


def _terminal(out: Bracketing, tag: str, word: str, stack: list[int],
              params: EvalbParams) -> None:
    out.length += tag not in params.delete_labels_for_length
    if tag in params.quote_labels and word in QUOTE_WORDS:
        out.quotes.append(Quote(tag, word, len(out.words), len(out.raw), list(stack)))
    if tag not in params.delete_labels:
        out.words.append(word)
        out.tags.append(tag)


def fix_quotes(gold: Bracketing, test: Bracketing, params: EvalbParams) -> None:
    """EVALB's fix_quote: where a quote term's tag is deleted on one side and kept on the
    other at the same position (a quote tagged POS, say), put it back on the deleted side."""
    for i, theirs in enumerate(test.quotes):
        at = theirs.index
        for j, ours in enumerate(gold.quotes):
            if ours.index != at or ours.tag == theirs.tag:
                continue
            if ours.tag in params.delete_labels and theirs.tag not in params.delete_labels:
                gold.reinsert(ours)
                for later in gold.quotes[j:]:
                    later.index += 1
            elif theirs.tag in params.delete_labels and ours.tag not in params.delete_labels:
                test.reinsert(theirs)
                for later in test.quotes[i:]:
                    later.index += 1


@dataclass(frozen=True)
class SentenceScore:
    """EVALB's line for one sentence; status 0 valid, 1 error, 2 skipped."""

    status: int
    length: int  # the gold's, for the cutoff
    matched: int
    gold: int
    test: int
    crossing: int
    words: int
    correct_tags: int
    problem: str = ""


def score_sentence(gold_line: str, test_line: str, params: EvalbParams = EvalbParams()
                   ) -> SentenceScore:
    """One sentence: the gold tree must be well-formed; a malformed test tree is an error."""
    gold = read_bracketing(gold_line, params)
    n_gold = len(gold.brackets(params))
    try:
        test = read_bracketing(test_line, params)
    except BracketError as err:
        return SentenceScore(1, gold.length, 0, n_gold, 0, 0, 0, 0, str(err))
    if not test.words:
        return SentenceScore(2, gold.length, 0, n_gold, len(test.brackets(params)), 0, 0, 0,
                             "empty")
    if len(test.words) != len(gold.words):
        fix_quotes(gold, test, params)
    gold_brackets, test_brackets = gold.brackets(params), test.brackets(params)
    if len(test.words) != len(gold.words):
        return SentenceScore(1, gold.length, 0, len(gold_brackets), len(test_brackets), 0, 0, 0,
                             f"length mismatch ({len(gold.words)}|{len(test.words)})")
    for g, t in zip(gold.words, test.words, strict=True):
        if not params.same_word(g, t):
            return SentenceScore(1, gold.length, 0, len(gold_brackets), len(test_brackets), 0,
                                 0, 0, f"words mismatch ({g}|{t})")
    return SentenceScore(0, gold.length, matches(gold_brackets, test_brackets, params),
                         len(gold_brackets), len(test_brackets),
                         crossings(gold_brackets, test_brackets), len(gold.words),
                         sum(params.same_label(g, t) for g, t in zip(gold.tags, test.tags,
                                                                     strict=True)))


Brackets = list[tuple[str, int, int]]


def matches(gold: Brackets, test: Brackets, params: EvalbParams) -> int:
    """Gold brackets matched, each by the first unmatched test bracket of its span and label."""
    used = [False] * len(test)
    found = 0
    for label, start, end in gold:
        for j, (t_label, t_start, t_end) in enumerate(test):
            if not used[j] and (t_start, t_end) == (start, end) and \
                    (not params.labeled or params.same_label(label, t_label)):
                used[j] = True
                found += 1
                break
    return found


def crossings(gold: Brackets, test: Brackets) -> int:
    """Test brackets that cross at least one gold bracket."""
    def cross(g, t) -> bool:
        return (g[1] < t[1] < g[2] < t[2]) or (t[1] < g[1] < t[2] < g[2])

    return sum(any(cross(g, t) for g in gold) for t in test)


def summary(scores: list[SentenceScore], *, cutoff: int | None = None, strict: bool = False
            ) -> dict:
    """EVALB's summary (of sentences of gold length <= cutoff, if given). strict: recall,
    precision, F1 and complete match count error and skipped sentences too, with no bracket
    matched and every gold bracket missed; crossing and tagging are of valid sentences."""
    chosen = [s for s in scores if cutoff is None or s.length <= cutoff]
    valid = [s for s in chosen if s.status == 0]
    scored = chosen if strict else valid
    matched, gold, test = (sum(getattr(s, k) for s in scored) for k in ("matched", "gold",
                                                                          "test"))
    words = sum(s.words for s in valid)
    recall = 100.0 * matched / gold if gold else 0.0
    precision = 100.0 * matched / test if test else 0.0

    def share(count: int, of: int) -> float:
        return 100.0 * count / of if of else 0.0

    return {
        "sentences": len(chosen), "errors": sum(s.status == 1 for s in chosen),
        "skipped": sum(s.status == 2 for s in chosen), "valid": len(valid),
        "recall": recall, "precision": precision,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "complete_match": share(sum(s.status == 0 and s.matched == s.gold == s.test
                                    for s in scored), len(scored)),
        "average_crossing": sum(s.crossing for s in valid) / len(valid) if valid else 0.0,
        "no_crossing": share(sum(s.crossing == 0 for s in valid), len(valid)),
        "two_or_less_crossing": share(sum(s.crossing <= 2 for s in valid), len(valid)),
        "tagging_accuracy": share(sum(s.correct_tags for s in valid), words),
    }


# EVALB's summary lines and the keys of summary() that hold the same figures
EVALB_NAMES = {"Number of sentence": "sentences", "Number of Error sentence": "errors",
               "Number of Skip  sentence": "skipped", "Number of Valid sentence": "valid",
               "Bracketing Recall": "recall", "Bracketing Precision": "precision",
               "Bracketing FMeasure": "f1", "Complete match": "complete_match",
               "Average crossing": "average_crossing", "No crossing": "no_crossing",
               "2 or less crossing": "two_or_less_crossing",
               "Tagging accuracy": "tagging_accuracy"}


def score_files(gold_path: Path, test_path: Path, params: EvalbParams = EvalbParams()
                ) -> list[SentenceScore]:
    """Every line of two files; a differing line count is an error naming both files."""
    gold = gold_path.read_text(encoding="utf-8").splitlines()
    test = test_path.read_text(encoding="utf-8").splitlines()
    if len(gold) != len(test):
        raise ValueError(f"{gold_path} has {len(gold)} trees, {test_path} {len(test)}: one "
                         "test line (possibly empty) per gold tree")
    scores = []
    for number, (g, t) in enumerate(zip(gold, test, strict=True), 1):
        try:
            scores.append(score_sentence(g, t, params))
        except BracketError as err:
            raise ValueError(f"{gold_path}:{number}: {err}") from None
    return scores
