"""Chapter 11 names the picture it was given, as chapter 10 does: the learner sees which picture it asks about."""
from PIL import Image

from test_published import _chapter


def test_ch11_names_the_picture_it_was_given(tiny_path, tmp_path):
    path = tmp_path / "my cat.png"
    Image.new("RGB", (60, 44), (200, 120, 40)).save(path)
    ns, out = _chapter("ch11_seeing.py", tiny_path, "--image", str(path), "--max-new-tokens", "2")
    assert ns["picture_name"] == str(path) and ns["image"].size == (60, 44)
    assert f"{path}: 60 x 44 pixels" in out.split("2. The prompt with an image")[1]
    ns, out = _chapter("ch11_seeing.py", tiny_path, "--max-new-tokens", "2")       # the default: chapter 10's picture
    from engine.pictures import demo_image
    assert ns["image"].size == demo_image().size
    assert f"{ns['picture_name']}: {ns['image'].width} x {ns['image'].height} pixels" in out
