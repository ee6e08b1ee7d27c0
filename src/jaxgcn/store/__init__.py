"""What a run leaves on disk and reads back: model checkpoints, many runs' checkpoints, the
resumable batch state and the manifests they share."""
