"""promote: the fail-closed last step that moves a registry alias only on complete, matching evidence."""
