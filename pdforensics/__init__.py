"""pdforensics: log and trace forensics for SGLang prefill-decode disaggregated serving."""

__version__ = "0.1.0"
