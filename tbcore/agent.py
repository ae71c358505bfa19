"""The computer-use agent's rounds, without I/O (issue 13; the chapter's §12.1.3, §12.3.1).

Every round the client captures a screenshot (:func:`render_screen`: a deterministic
synthetic desktop drawn with Pillow, changed by the round number), sends it raw or
compressed (:func:`encode_screen`: a real codec through Pillow, its time measured), the
server's model decides and replies a small action; the next round cannot start before it.

Operation ids (:func:`op_id`) make a retried round idempotent: the server's
:class:`OpStore` executes each id once and answers a known id with the stored result (a
QUIC 0-RTT replay too). :class:`RoundPlan` is the client's progress: ``committed`` resumes
after the last acknowledged round, ``restart`` redoes every round of the task (new ids).

Independent attempts (the chapter's §12.5.2, E = C / p): with ``task_success`` the model
judges each attempt of a task at its last round (:func:`task_outcome`, success with
probability p); a failed attempt is redone whole, as a new attempt with new ids
(:meth:`RoundPlan.task_failed`), and ``agent_tasks`` tasks follow each other in one run.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import dataclass, field
from typing import Any

from tbcore.bounded import BoundedStore

SCREEN_WIDTH_PX = 640
SCREEN_HEIGHT_PX = 416
RAW_SCREEN_BYTES = SCREEN_WIDTH_PX * SCREEN_HEIGHT_PX * 3
"""Raw RGB: 798,720 bytes, the chapter's 0.8 MB screenshot as sent raw (§12.1.3)."""
CODECS = {"webp": "WEBP", "jpeg": "JPEG"}
"""``screenshot`` values that compress, with Pillow's format name; ``raw`` sends RGB."""
SCREENSHOT_MODES = ("raw", *CODECS)
SCREENS = ("desktop", "photo")
"""What the screen shows: a desktop of windows and text (compresses to 30-80 kB), or an
image viewer filling it with fine random detail (at JPEG quality 96 about 207 kB: the
chapter's 0.2 MB compressed screenshot, §12.1.3)."""
PHOTO_DETAIL = 3
"""The photo viewer's texture: random pixels at a third of the screen's resolution, scaled
up (bilinear): detail a codec cannot drop, as a photograph's."""
RECOVERY_MODES = ("committed", "restart")
ACTIONS = ("click", "type", "scroll", "drag")


def render_screen(round_index: int, seed: int = 0, screen: str = "desktop") -> Any:
    """A synthetic desktop (gradient wallpaper, windows with title bars and text, icons,
    a taskbar, a cursor) as a Pillow RGB image, or (``screen = "photo"``) the same desktop
    with a photo viewer maximized over it; equal arguments, equal pixels."""
    if screen not in SCREENS:
        raise ValueError(f"screen {screen!r}")
    from PIL import Image, ImageDraw

    w, h = SCREEN_WIDTH_PX, SCREEN_HEIGHT_PX
    shift = (round_index * 37 + seed * 11) % 256
    # wallpaper: a diagonal gradient whose hue moves with the round
    import numpy as np

    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // w + shift) % 256
    g = (y * 255 // h + shift // 2) % 256
    b = ((x + y) * 255 // (w + h) + 128) % 256
    pixels = np.stack([r, g, b], axis=-1).astype("uint8")
    # an image viewer with a photo-like panel (seeded texture: what makes real screens
    # costly to compress)
    rng = np.random.default_rng(seed * 100_003 + round_index)
    noise = rng.integers(0, 256, size=(h // 4, w // 4, 3), dtype="uint8")
    photo = np.asarray(Image.fromarray(noise, "RGB").resize((w // 2, h // 2), Image.BILINEAR))
    px, py = w // 2 - 20, h // 2 - 40
    pixels[py : py + h // 2, px : px + w // 2] = photo
    img = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(img)
    # desktop icons
    for i in range(6):
        ix, iy = 12, 12 + i * 56
        colour = ((i * 40 + shift) % 256, (i * 90) % 256, (200 - i * 30) % 256)
        draw.rounded_rectangle([ix, iy, ix + 36, iy + 36], radius=6, fill=colour)
        draw.text((ix - 2, iy + 38), f"app{i}", fill=(255, 255, 255))
    # windows: positions and contents follow the round (the previous action changed them)
    for k in range(3):
        wx = 70 + ((round_index * 29 + k * 140) % 300)
        wy = 20 + ((round_index * 17 + k * 90) % 200)
        ww, wh = 260, 170
        draw.rectangle([wx + 4, wy + 4, wx + ww + 4, wy + wh + 4], fill=(40, 40, 40))
        draw.rectangle([wx, wy, wx + ww, wy + wh], fill=(245, 245, 240), outline=(60, 60, 60))
        draw.rectangle([wx, wy, wx + ww, wy + 18], fill=(50 + k * 60, 90, 160))
        draw.text((wx + 6, wy + 3), f"Window {k} - round {round_index}", fill=(255, 255, 255))
        for line in range(9):
            text = f"{(round_index + line * 7 + k) % 97:02d} lorem ipsum item {line} {k}"
            draw.text((wx + 8, wy + 24 + line * 15), text, fill=(20, 20, 20))
        draw.rectangle([wx + ww - 70, wy + wh - 26, wx + ww - 10, wy + wh - 8], fill=(0, 120, 215))
        draw.text((wx + ww - 60, wy + wh - 24), "OK", fill=(255, 255, 255))
    # taskbar and clock
    draw.rectangle([0, h - 28, w, h], fill=(30, 30, 40))
    for i in range(8):
        draw.rectangle([50 + i * 34, h - 24, 74 + i * 34, h - 4], fill=((i * 31) % 256, 140, 90))
    draw.text(
        (w - 60, h - 20),
        f"{(round_index // 60) % 24:02d}:{round_index % 60:02d}",
        fill=(255, 255, 255),
    )
    if screen == "photo":
        _photo_viewer(img, round_index, seed)
        draw = ImageDraw.Draw(img)
    # cursor
    cx, cy = (round_index * 53) % (w - 20), (round_index * 31) % (h - 40)
    draw.polygon([(cx, cy), (cx, cy + 18), (cx + 5, cy + 13), (cx + 12, cy + 13)], fill=(0, 0, 0))
    return img


def _photo_viewer(img: Any, round_index: int, seed: int) -> None:
    """A photo viewer maximized above the taskbar: a title bar and a photograph-like
    texture that changes with the round (the next photo)."""
    import numpy as np
    from PIL import Image, ImageDraw

    w, h = SCREEN_WIDTH_PX, SCREEN_HEIGHT_PX - 28
    rng = np.random.default_rng(seed * 100_019 + round_index + 7)
    small = (h // PHOTO_DETAIL, w // PHOTO_DETAIL, 3)
    noise = rng.integers(0, 256, size=small, dtype="uint8")
    photo = Image.fromarray(noise, "RGB").resize((w, h - 18), Image.BILINEAR)
    img.paste(photo, (0, 18))
    draw = ImageDraw.Draw(img)
    draw.rectangle([0, 0, w, 17], fill=(40, 40, 48))
    draw.text((6, 3), f"Photos - IMG_{1000 + round_index}.jpg", fill=(255, 255, 255))


def encode_screen(img: Any, screenshot: str, quality: int) -> tuple[bytes, float]:
    """(the bytes sent, encode seconds measured): raw RGB (no encode: 0 s) or a codec."""
    if screenshot == "raw":
        return img.tobytes(), 0.0
    fmt = CODECS[screenshot]
    buf = io.BytesIO()
    t0 = time.perf_counter()
    img.save(buf, format=fmt, quality=quality)
    return buf.getvalue(), time.perf_counter() - t0


def op_id(token: str, attempt: int, round_index: int) -> str:
    """The id of one round's operation: a retry of the same attempt reuses it."""
    return f"{token}-a{attempt}-r{round_index}"


def action_for(op: str, upload_sha256: str, round_index: int) -> dict[str, Any]:
    """The model's (deterministic) decision: a small action derived from the screenshot."""
    digest = hashlib.sha256(f"{op}:{upload_sha256}".encode()).digest()
    return {
        "op": op,
        "round": round_index,
        "action": ACTIONS[digest[0] % len(ACTIONS)],
        "x": int.from_bytes(digest[1:3], "big") % SCREEN_WIDTH_PX,
        "y": int.from_bytes(digest[3:5], "big") % SCREEN_HEIGHT_PX,
        "upload_sha256": upload_sha256,
    }


TASK_DONE = "done"
TASK_FAILED = "failed"
TASK_OUTCOMES = (TASK_DONE, TASK_FAILED)
"""The model's verdict on a task attempt, in the last round's action (``task``)."""


def task_outcome(op: str, success: float) -> str:
    """The model's verdict on the task attempt whose last round is ``op``: done with
    probability ``success``. The draw is the operation id's hash: independent between
    attempts (each has its own ids, the client's token makes them unique to the run), and
    the same for a retry of the same round (a stored result keeps its verdict)."""
    digest = hashlib.sha256(f"{op}:task-outcome".encode()).digest()
    draw = int.from_bytes(digest[:8], "big") / 2.0**64
    return TASK_DONE if draw < success else TASK_FAILED


def expected_rounds(rounds: int, tasks: int = 1, success: float | None = None) -> float:
    """The measured rounds a run makes on average: each task's ``rounds`` once an attempt,
    and 1 / p attempts a task where the model judges them with success ``p`` (E = C / p,
    the chapter's §12.5.2)."""
    return tasks * rounds / (success or 1.0)


@dataclass
class StoredResult:
    body: bytes
    ready_s: float
    """When the execution's decision is (was) ready: a retry waits until then."""
    executions: int = 1


MAX_STORED_OPS = 20_000
"""Operation ids a server remembers (about 770 bytes each: 15 MB): hundreds of agent tasks
of 30 rounds; the oldest is forgotten first, and the count of those forgotten is kept."""
MAX_OP_AGE_S = 3600.0
"""An operation id is remembered for an hour: a retry comes within a task (seconds to
minutes); a replay of an id older than this executes again."""


@dataclass
class OpStore:
    """The server's executed operations: each id executes once; a known id gets the stored
    result (after the first execution's decision time, if it is still running). Bounded by
    count and age (tbcore.bounded), so a client inventing ids cannot grow it forever."""

    results: BoundedStore[StoredResult] = field(
        default_factory=lambda: BoundedStore(MAX_STORED_OPS, MAX_OP_AGE_S)
    )

    def execute(
        self,
        op: str,
        round_index: int,
        upload_sha256: str,
        model_s: float,
        now: float,
        task_success: float | None = None,
    ) -> tuple[bytes, float, bool]:
        """(reply body, seconds to wait before sending it, executed now). ``task_success``:
        the round ends a task attempt the model judges (:func:`task_outcome`)."""
        known = self.results.get(op, now)
        if known is not None:
            return known.body, max(0.0, known.ready_s - now), False
        action = action_for(op, upload_sha256, round_index)
        if task_success is not None:
            action["task"] = task_outcome(op, task_success)
        body = (json.dumps({**action, "model_s": model_s}) + "\n").encode()
        self.results.put(op, StoredResult(body=body, ready_s=now + model_s), now)
        return body, model_s, True

    def executions(self) -> int:
        return sum(r.executions for r in self.results.values())


@dataclass
class RoundPlan:
    """The client's progress through ``rounds`` rounds under a recovery mode."""

    rounds: int
    recovery: str = "committed"
    token: str = "agent"
    attempt: int = 0
    acked: int = 0
    """Rounds acknowledged in the current attempt (the next round's index)."""
    started: set[int] = field(default_factory=set)
    """Rounds begun so far (a round begun again is 'redone')."""
    kept: int = 0
    """Rounds before the task's (its warm-up rounds, the tasks done before it): a restart
    goes back to the task's first round, not to them (the chapter's 'all 10 rounds again',
    §12.5.2)."""
    per_task: int | None = None
    """Rounds of one task when the run has several (``agent_tasks``) or the model judges
    each attempt (``task_success``); None: one task of every round after ``kept``."""
    task: int = 0
    """The task under way (0-based)."""

    def __post_init__(self) -> None:
        if self.recovery not in RECOVERY_MODES:
            raise ValueError(f"recovery {self.recovery!r}")
        if self.per_task is not None and (
            self.per_task < 1 or (self.rounds - self.kept) % self.per_task
        ):
            raise ValueError(f"per_task {self.per_task!r} does not divide the task's rounds")

    def ends_attempt(self, index: int) -> bool:
        """Whether round ``index`` is the last of its task (a judged attempt ends there)."""
        if self.per_task is None or index < self.kept:
            return False
        return (index - self.kept + 1) % self.per_task == 0

    def task_done(self) -> None:
        """The model judged the attempt that just ended done: the next task begins."""
        self.kept = self.acked
        self.task += 1
        self.attempt += 1

    def task_failed(self) -> None:
        """The model judged the attempt that just ended failed: the task again, whole, as a
        new attempt (new ids: the chapter's 'redo everything', §12.5.2)."""
        self.attempt += 1
        self.acked = self.kept

    @property
    def finished(self) -> bool:
        return self.acked >= self.rounds

    def next_round(self) -> tuple[int, str, bool]:
        """(round index, its operation id, redone)."""
        index = self.acked
        redone = index in self.started
        self.started.add(index)
        return index, op_id(self.token, self.attempt, index), redone

    def acknowledged(self) -> None:
        self.acked += 1

    def lost(self) -> None:
        """The round in flight failed (outage, connection lost)."""
        if self.recovery == "committed":
            return  # the same round again, with the same id
        self.attempt += 1
        self.acked = min(self.kept, self.acked)
