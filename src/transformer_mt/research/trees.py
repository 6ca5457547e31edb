"""Constituency trees as sequences, for the paper's §6.3 parsing experiment.

Penn Treebank trees are read, preprocessed as parsers do (function tags cut, `-NONE-` empty
elements removed with the constituents they leave empty, the unlabeled root removed) and
linearised as Vinyals et al. (2015) do: an opening token per constituent ("(NP"), a closing
token with its label (")NP"), and per word a slot: its POS tag (the paper's code's), the
placeholder XX (Vinyals et al.'s), or (not in the paper) the word itself, which the model then
copies from the source. The source of a parsing pair is the words, the target the linearised
tree. `restore` rebuilds a tree from a predicted sequence and the sentence's words, repairing
what a model may get wrong, and says what it repaired.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

PLACEHOLDER = "XX"
Slots = Literal["placeholder", "tags", "words"]  # what stands for a word in the target
SLOTS: tuple[Slots, ...] = ("placeholder", "tags", "words")
# The paper does not say how it wrote its trees; its code (tensor2tensor's wsj_parsing.py,
# words_and_tags_from_wsj_tree) keeps each word's POS tag as its slot, where Vinyals et al.
# (2015), whose linearisation it is, replaced the tags by the placeholder XX.
DEFAULT_SLOTS: Slots = "tags"
TOKENS = re.compile(r"\(|\)|[^\s()]+")
PARENS = ("(", ")")
# The Treebank's punctuation tags, which follow from the word: a placeholder slot filled with
# one of these words gets its tag, so that EVALB's COLLINS.prm deletes it as it does the gold's.
PUNCTUATION_TAGS = {",": ",", ".": ".", "?": ".", "!": ".", ":": ":", ";": ":", "--": ":",
                    "...": ":", "``": "``", "''": "''"}
PUNCTUATION = frozenset(PUNCTUATION_TAGS.values())
# words tagged as punctuation in some trees and not in others (' as '' or POS): as predicted
MAYBE_PUNCTUATION = ("'", "`", "-")
NO_FUNCTION_TAGS = ("-NONE-", "-LRB-", "-RRB-")  # labels that begin with a dash


class TreeError(ValueError):
    """Text that is not one well-formed bracketed tree."""


@dataclass
class Tree:
    """A constituent (label, children) or a pre-terminal (label = POS tag, word)."""

    label: str
    children: list[Tree] = field(default_factory=list)
    word: str | None = None

    # Without recursion: a predicted tree may nest as deep as its output is long (hundreds).

    def preterminals(self) -> list[Tree]:
        """The pre-terminals, left to right."""
        found, todo = [], [self]
        while todo:
            node = todo.pop()
            if node.word is not None:
                found.append(node)
            else:
                todo.extend(reversed(node.children))
        return found

    def words(self) -> list[str]:
        return [p.word for p in self.preterminals()]

    def tags(self) -> list[str]:
        return [p.label for p in self.preterminals()]

    def __str__(self) -> str:
        """"(S (NP (DT the) (NN dog)) (VP (VBZ runs)))"."""
        parts: list[str] = []
        todo: list[Tree | str] = [self]
        while todo:
            item = todo.pop()
            if isinstance(item, str):
                parts.append(item)
            elif item.word is not None:
                parts.append(f"({item.label} {item.word})")
            else:
                parts.append(f"({item.label} ")
                todo.append(")")
                for i, child in enumerate(reversed(item.children)):
                    todo += [" ", child] if i else [child]
        return "".join(parts)


def parse_tree(text: str) -> Tree:
    """One bracketed tree; `( (S ...) )`, the Treebank's unlabeled root, gets the label ''."""
    tokens = TOKENS.findall(text)
    stack: list[Tree] = []
    done: Tree | None = None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if done is not None:
            raise TreeError("unbalanced: too many closing brackets" if token == ")" else
                            f"text after the tree's end: {' '.join(tokens[i:i + 5])}")
        if token == "(":
            label = tokens[i + 1] if i + 1 < len(tokens) and tokens[i + 1] not in PARENS else ""
            i += 2 if label else 1
            if i + 1 < len(tokens) and tokens[i] not in PARENS and tokens[i + 1] == ")":
                node = Tree(label, word=tokens[i])
                i += 2
                if not stack:
                    raise TreeError(f"a pre-terminal outside a tree: {node}")
                stack[-1].children.append(node)
                continue
            if i < len(tokens) and tokens[i] not in PARENS:
                raise TreeError(f"more than a word in ({label} {tokens[i]} ...")
            stack.append(Tree(label))
        elif token == ")":
            if not stack:
                raise TreeError("unbalanced: too many closing brackets")
            node = stack.pop()
            if stack:
                stack[-1].children.append(node)
            else:
                done = node
            i += 1
        else:
            raise TreeError(f"a word outside brackets: {token!r}")
    if stack or done is None:
        raise TreeError("unbalanced: too many opening brackets" if stack else "no tree")
    return done


def preprocess(tree: Tree) -> Tree | None:
    """Function tags cut (NP-SBJ-1 -> NP, NP=2 -> NP), -NONE- elements and the constituents
    they empty removed, the unlabeled root removed; None if nothing is left."""
    if tree.word is not None:
        return None if tree.label == "-NONE-" else Tree(tree.label, word=tree.word)
    label = tree.label if tree.label in NO_FUNCTION_TAGS else \
        re.split(r"(?<=.)[-=]", tree.label, maxsplit=1)[0]
    children = [c for c in (preprocess(child) for child in tree.children) if c is not None]
    if not children:
        return None
    if label == "" and len(children) == 1:
        return children[0]
    return Tree(label, children)


def linearise(tree: Tree, *, slots: Slots = DEFAULT_SLOTS) -> list[str]:
    """Vinyals et al.'s sequence with the POS tags as slots: "(S (NP DT NN )NP (VP VBZ )VP )S";
    slots="placeholder" writes XX for each tag, slots="words" each word ("(S (NP the dog )NP
    (VP runs )VP )S")."""
    if tree.word is not None:
        return [{"placeholder": PLACEHOLDER, "tags": tree.label, "words": tree.word}[slots]]
    return [f"({tree.label}", *(t for child in tree.children
                                for t in linearise(child, slots=slots)), f"){tree.label}"]


def is_bracket(token: str) -> bool:
    """An opening or closing token of a linearised tree ("(NP", ")NP"), not a word slot."""
    return len(token) > 1 and token[0] in PARENS


def slot_tag(token: str, word: str) -> str:
    """The tag of a word slot `token` (XX or a predicted tag) filled with `word`: a punctuation
    word's tag follows from the word (PUNCTUATION_TAGS), and other words get no punctuation
    tag (XX instead) unless they may be punctuation (MAYBE_PUNCTUATION), so that EVALB deletes
    the parse's punctuation where it deletes the gold's instead of failing the sentence on a
    length mismatch."""
    if word in PUNCTUATION_TAGS:
        return PUNCTUATION_TAGS[word]
    if token in PUNCTUATION and word not in MAYBE_PUNCTUATION:
        return PLACEHOLDER
    return token


@dataclass
class Restored:
    tree: Tree
    repairs: list[str]  # "kind: detail" of each repair; empty when the sequence was well-formed

    @property
    def one_slot_per_word(self) -> bool:
        """Whether the sequence had exactly one word slot per word, before any repair."""
        return not any(r.startswith(("extra slot:", "missing words:")) for r in self.repairs)


def restore(tokens: list[str], words: list[str], *, root: str = "S",
            slots: Slots = DEFAULT_SLOTS) -> Restored:
    """The tree of a (predicted) sequence, its word slots (XX, tags or copied words, as
    `slots` says) filled with `words` (punctuation tagged from the words: slot_tag; copied
    words tagged as XX would be).
    Repairs, each named in .repairs: a closing token with no open constituent is dropped; one
    whose label differs from the open constituent's closes that one; constituents left open
    are closed; those with nothing in them are dropped; a predicted tag that slot_tag changes
    is replaced; word slots beyond the sentence's words are dropped and missing words are
    added, tagged XX, to the last open constituent; several top-level constituents (or none)
    are put under one `root`; a copied word that is not the sentence's word there is replaced.
    The result always has exactly `words` as its words."""
    repairs: list[str] = []
    stack: list[Tree] = [Tree("")]  # a holder of the top-level constituents
    next_word = 0

    def close() -> None:  # the open constituent, into its parent unless it has nothing
        node = stack.pop()
        if node.children:
            stack[-1].children.append(node)
        else:  # printed "(NP )" it would read as a word, EVALB's way
            repairs.append(f"empty: dropped ({node.label}")

    for token in tokens:
        if is_bracket(token) and token[0] == "(":
            stack.append(Tree(token[1:]))
        elif is_bracket(token):
            if len(stack) == 1:
                repairs.append(f"unopened: dropped {token}, nothing open")
                continue
            if stack[-1].label != token[1:]:
                repairs.append(f"mislabelled: {token} closed ({stack[-1].label}")
            close()
        elif next_word < len(words):
            word = words[next_word]
            if slots == "words":
                if token != word:
                    repairs.append(f"miscopied: {word} for {token}")
                token = PLACEHOLDER
            tag = slot_tag(token, word)
            if tag != token and token != PLACEHOLDER:
                repairs.append(f"punctuation tag: {word} tagged {tag}, not {token}")
            stack[-1].children.append(Tree(tag, word=word))
            next_word += 1
        else:
            repairs.append(f"extra slot: dropped {token}, the sentence has {len(words)} words")
    if next_word < len(words):
        repairs.append(f"missing words: added {len(words) - next_word}")
        stack[-1].children += [Tree(slot_tag(PLACEHOLDER, w), word=w)
                               for w in words[next_word:]]
    if len(stack) > 1:
        repairs.append(f"unclosed: closed {len(stack) - 1} constituents")
    while len(stack) > 1:
        close()
    top = stack[0].children
    if len(top) == 1 and top[0].word is None:
        return Restored(top[0], repairs)
    if top:
        repairs.append(f"several roots: put {len(top)} top-level items under ({root}")
    return Restored(Tree(root, top), repairs)


def parsing_pair(line: str, *, slots: Slots = DEFAULT_SLOTS) -> tuple[str, str, Tree]:
    """One Treebank line as a parsing pair: (its words, its linearised tree, the preprocessed
    tree); a TreeError names what is wrong, and a tree of nothing but empty elements is one."""
    tree = preprocess(parse_tree(line))
    if tree is None:
        raise TreeError("nothing is left after removing the empty elements")
    return " ".join(tree.words()), " ".join(linearise(tree, slots=slots)), tree
