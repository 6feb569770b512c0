"""Incremental detokenization: split characters print once and whole; stop strings never leak."""

from app.engine.decoding.detok import TextStream


def feed_all(stream: TextStream, chunks: list[bytes]) -> list[str]:
    out = [stream.feed(c) for c in chunks]
    out.append(stream.flush())
    return out


def test_emoji_split_across_chunks_prints_once_and_whole():
    emoji = "😀".encode()
    stream = TextStream()
    out = feed_all(stream, [b"hi ", emoji[:1], emoji[1:3], emoji[3:], " 日本".encode()])
    assert "".join(out) == "hi 😀 日本"
    assert out[1] == "" and out[2] == "" and out[3] == "😀"
    assert "\ufffd" not in "".join(out)


def test_stop_string_is_not_printed_even_partially():
    stream = TextStream(stop=["</end>"])
    out = feed_all(stream, [b"answer </", b"en", b"d> more"])
    assert "".join(out) == "answer "
    assert stream.stopped
    assert stream.text == "answer "


def test_held_back_prefix_is_released_when_it_is_not_a_stop():
    stream = TextStream(stop=["STOP"])
    out = feed_all(stream, [b"a ST", b"ILL here"])
    assert out[0] == "a "
    assert "".join(out) == "a STILL here"
    assert not stream.stopped


def test_earliest_of_several_stop_strings_wins():
    stream = TextStream(stop=["world", "lo"])
    out = feed_all(stream, [b"hello world"])
    assert "".join(out) == "hel"
