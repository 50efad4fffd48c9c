"""The audio pipeline of AudioService: voice activity detection, turn-taking, speech recognition, reply
text cut into clauses, speech synthesis and the playback estimate behind barge-in (see docs/audio.md).
Each stage is a small interface with one offline CPU implementation; the servicers wire them together."""
