"""The Models pages: multi-head and relative attention, sublayers, stacks, seq2seq.

Every name is re-exported by :mod:`named_transformer`; import it as
``nt.MultiHeadAttention``.
"""
