"""Speculative decoding: a draft model, prompt lookup or a predicted answer proposes tokens, the target verifies
them in one batch; the calibration decides from kept measurements, never the clock, whether drafting pays."""
