"""Video rows of the diffusion data contract: a clip decoded with PyAV (FFmpeg) and `frames` frames sampled evenly
across it, each resized (shorter side) and center-cropped to height x width. No torch here: `yeto launch` checks
every clip with `clip_errors` before anything starts. A clip's bytes are hostile: any decoding failure is that row's
error, never the run's."""
from __future__ import annotations

import io
from pathlib import Path

from yeto.learners.data.diffusion import MediaItem

MAX_FRAMES = 10_000          # a clip decoding to more frames is refused (a short clip is the contract)


def _source(item: MediaItem):
    if item.path is not None and Path(item.path).is_file():
        return item.path
    media = item.media
    raw = media.get("bytes") if isinstance(media, dict) else media
    if not isinstance(raw, (bytes, bytearray)):
        raise ValueError("no video bytes")
    return io.BytesIO(raw)


def decode(item: MediaItem) -> list:
    """Every frame of the clip as a PIL image (RGB)."""
    import av
    frames = []
    try:
        with av.open(_source(item)) as container:
            if not container.streams.video:
                raise ValueError("no video stream")
            for frame in container.decode(video=0):
                frames.append(frame.to_image())
                if len(frames) > MAX_FRAMES:
                    raise ValueError(f"more than {MAX_FRAMES} frames: not a short clip")
    except (av.FFmpegError, OSError, EOFError) as e:
        raise ValueError(f"not a readable video ({type(e).__name__})") from None
    return frames


def sample(frames: list, count: int) -> list:
    """`count` frames evenly spaced from first to last."""
    if len(frames) < count:
        raise ValueError(f"{len(frames)} frames, fewer than --frames {count}")
    if count == 1:
        return frames[:1]
    return [frames[round(i * (len(frames) - 1) / (count - 1))] for i in range(count)]


def fit(image, height: int, width: int):
    """Resized so it covers height x width (shorter side first), then center-cropped to it."""
    from PIL import Image
    image = image.convert("RGB")
    scale = max(height / image.height, width / image.width)
    w, h = max(width, round(image.width * scale)), max(height, round(image.height * scale))
    image = image.resize((w, h), Image.Resampling.BICUBIC)
    left, top = (w - width) // 2, (h - height) // 2
    return image.crop((left, top, left + width, top + height))


def clip_frames(item: MediaItem, frames: int, height: int, width: int) -> list:
    return [fit(f, height, width) for f in sample(decode(item), frames)]


def clip_errors(items: list[MediaItem], frames: int) -> list[str]:
    """One "<file>: <reason>" per row that is not a clip of at least `frames` frames (images, unreadable files)."""
    bad = []
    for n, item in enumerate(items, 1):
        where = Path(item.path).name if isinstance(item.path, str) else f"row {n}"
        if item.kind != "video":
            bad.append(f"{where}: an image where --frames {frames} asks for clips")
            continue
        try:
            sample(decode(item), frames)
        except ValueError as e:
            bad.append(f"{where}: {e}")
    return bad
