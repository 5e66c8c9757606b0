"""The equations of the Learn pages: softmax, scores, masks, attention, norm, positions.

Every name is re-exported by :mod:`named_transformer`; import it as ``nt.attention``.
"""
