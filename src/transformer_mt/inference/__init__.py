"""Decoding (§6.1): the decoding protocol and its searches (greedy, beam, sampling), ensembles,
int8 quantisation, and the Translator (sentences in, sentences out)."""
