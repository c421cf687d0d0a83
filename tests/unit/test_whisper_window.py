"""The window whisper's encoder reads (`engines.whisper.window_frames`, `trimmed`): pure, no
model. That a short window transcribes as well as the 30 s one is `bench/whisper_window.py`'s
claim, not a test's."""
import numpy as np
import pytest

from hypnos.engines.whisper import FULL_WINDOW, SHORT_WINDOW, TAIL, trimmed, window_frames, within


@pytest.mark.parametrize("content,frames", [
    (0, SHORT_WINDOW), (169, SHORT_WINDOW), (SHORT_WINDOW - TAIL, SHORT_WINDOW),
    (SHORT_WINDOW - TAIL + 1, FULL_WINDOW), (1600, FULL_WINDOW), (FULL_WINDOW, FULL_WINDOW)])
def test_the_short_window_only_when_the_clip_and_a_second_fit_in_it(content, frames):
    assert window_frames(content) == frames


def padded(content: int, shape=(80,)) -> np.ndarray:
    x = np.zeros((*shape, FULL_WINDOW), np.float32)
    x[..., :content] = -0.5
    return x


def test_a_short_clip_keeps_ten_seconds_of_its_padding():
    x = padded(169)
    x[3, 168] = 0.25                    # the last frame of audio is found by any band
    out = trimmed(x)
    assert out.shape == (80, SHORT_WINDOW) and out.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(out, x[:, :SHORT_WINDOW])


def test_a_frame_of_audio_with_some_zero_bands_still_counts():
    x = padded(SHORT_WINDOW - TAIL + 1)
    x[:79, SHORT_WINDOW - TAIL] = 0     # one band left non-zero in the last frame
    assert trimmed(x) is x


def test_batched_features_keep_the_longest_clip():
    x = np.zeros((2, 80, FULL_WINDOW), np.float32)
    x[0, :, :300] = -1
    x[1, :, :850] = -1
    assert trimmed(x).shape == (2, 80, SHORT_WINDOW)
    x[1, :, :950] = -1
    assert trimmed(x) is x


@pytest.mark.parametrize("x", [padded(FULL_WINDOW - 50), np.ones((80, 1234), np.float32)])
def test_a_full_window_or_one_of_another_size_is_left_alone(x):
    assert trimmed(x) is x


def test_all_padding_reads_the_least_window():
    assert trimmed(np.zeros((80, FULL_WINDOW), np.float32)).shape[-1] == SHORT_WINDOW


@pytest.mark.parametrize("start,end,duration,expected", [
    (0.0, 2.4, 2.86, (0.0, 2.4)),           # inside: only rounded
    (0.0, 7.0, 2.8636, (0.0, 2.863)),      # an end past the audio ends with it (in whole ms)
    (3.5, 7.0, 2.86, (2.86, 2.86)),         # a segment wholly past it: empty at the end
    (-0.02, 1.0, 2.0, (0.0, 1.0)),          # never before the start
    (1.23456, 1.98765, 5.0, (1.235, 1.988)),
])
def test_segment_times_stay_inside_the_audio(start, end, duration, expected):
    assert within(start, end, duration) == expected
