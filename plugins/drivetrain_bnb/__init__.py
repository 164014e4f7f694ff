"""Quantised loading through bitsandbytes (``BnbQuantizationConfig``, ``load_and_quantize_model``)."""
