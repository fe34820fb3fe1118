"""Screens pushed over the console's views: the job screen, `?` help and the modal dialogs."""
