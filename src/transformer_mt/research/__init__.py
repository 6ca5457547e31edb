"""Research beside the core: the experiments the paper reports and the views that help read a
model, built on the core layers and never imported by them (tests/test_architecture.py).
`table3.py`: Table 3's variations, trained and scored row by row; `attention_view.py`: attention
maps drawn; `trees.py`, `tree_search.py` and `evalb.py`: §6.3's constituency parsing as
translation (trees as sequences, the search kept to trees, EVALB's bracket scores)."""
