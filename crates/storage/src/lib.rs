//! Durable storage of a Waverunner replica (work in progress).
