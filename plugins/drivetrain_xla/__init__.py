"""The ``xla`` platform plugin: TPUs (and other PJRT devices) through torch_xla."""
