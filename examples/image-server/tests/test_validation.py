"""parse_generate_request: every rule a client can break, and the reference image formats."""

import base64

import pytest

from images import data_url, encoded, plain_base64
from validation import ClientError, parse_generate_request, parse_json_body
from variants import find_variant

DISTILLED = find_variant("4b", "distilled")
BASE = find_variant("9b", "base")


def parse(body, variant=DISTILLED, max_images=4):
    return parse_generate_request(body, variant, max_images)


def refusal(body, variant=DISTILLED, max_images=4) -> ClientError:
    with pytest.raises(ClientError) as caught:
        parse(body, variant, max_images)
    assert caught.value.status == 400
    return caught.value


def test_a_prompt_alone_takes_every_default():
    request = parse({"prompt": "a fox"})
    assert (request.width, request.height, request.num_inference_steps, request.guidance_scale) == (1024, 1024, 4, 1.0)
    assert request.seed is None
    assert request.images == ()


def test_the_base_variant_defaults_to_fifty_steps_at_guidance_four():
    request = parse({"prompt": "a fox"}, BASE)
    assert (request.num_inference_steps, request.guidance_scale) == (50, 4.0)


@pytest.mark.parametrize("prompt", [None, "", "   \n", 12, ["a"], "x" * 10_001])
def test_the_prompt_must_be_a_non_empty_string_of_sensible_length(prompt):
    body = {} if prompt is None else {"prompt": prompt}
    assert refusal(body).field == "prompt"


@pytest.mark.parametrize("field", ["width", "height"])
@pytest.mark.parametrize("value", [1000, 48, 0, -16, 4112, 512.0, "512", True, None])
def test_sides_are_integer_multiples_of_16_from_64(field, value):
    assert refusal({"prompt": "x", field: value}).field == field


def test_the_smallest_and_the_largest_allowed_sizes_pass():
    assert parse({"prompt": "x", "width": 64, "height": 64}).width == 64
    assert parse({"prompt": "x", "width": 2048, "height": 2048}).height == 2048
    assert parse({"prompt": "x", "width": 4096, "height": 1024}).width == 4096


def test_more_than_four_megapixels_is_refused_and_names_the_size():
    error = refusal({"prompt": "x", "width": 2048, "height": 2064})
    assert error.field == "width"
    assert "2048x2064" in error.message


def test_the_distilled_variant_accepts_only_its_own_steps_and_guidance():
    assert parse({"prompt": "x", "num_inference_steps": 4, "guidance_scale": 1}).guidance_scale == 1.0
    steps = refusal({"prompt": "x", "num_inference_steps": 8})
    assert steps.field == "num_inference_steps"
    assert "--variant base" in steps.message
    assert refusal({"prompt": "x", "guidance_scale": 2.0}).field == "guidance_scale"


@pytest.mark.parametrize("body, field", [
    ({"num_inference_steps": 0}, "num_inference_steps"),
    ({"num_inference_steps": 101}, "num_inference_steps"),
    ({"num_inference_steps": 20.5}, "num_inference_steps"),
    ({"guidance_scale": 0.9}, "guidance_scale"),
    ({"guidance_scale": 10.5}, "guidance_scale"),
    ({"guidance_scale": "4"}, "guidance_scale"),
    ({"guidance_scale": False}, "guidance_scale"),
])
def test_the_base_variant_bounds_steps_and_guidance(body, field):
    assert refusal({"prompt": "x", **body}, BASE).field == field


def test_the_base_variant_takes_tuned_steps_and_guidance():
    request = parse({"prompt": "x", "num_inference_steps": 28, "guidance_scale": 3}, BASE)
    assert (request.num_inference_steps, request.guidance_scale) == (28, 3.0)


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "42", True])
def test_a_seed_is_an_integer_in_range(seed):
    assert refusal({"prompt": "x", "seed": seed}).field == "seed"


def test_seeds_at_the_edges_pass():
    assert parse({"prompt": "x", "seed": 0}).seed == 0
    assert parse({"prompt": "x", "seed": 2**32 - 1}).seed == 2**32 - 1


def test_an_unknown_field_is_named_so_typos_do_not_pass_silently():
    error = refusal({"prompt": "x", "steps": 4})
    assert error.field == "steps"
    assert "num_inference_steps" in error.message


@pytest.mark.parametrize("image_format", ["PNG", "JPEG", "WEBP"])
def test_reference_images_come_as_data_urls_or_plain_base64(image_format):
    request = parse({"prompt": "x", "images": [data_url(image_format=image_format),
                                                 plain_base64(image_format=image_format)]})
    assert [image.size for image in request.images] == [(96, 80), (96, 80)]
    assert all(image.mode == "RGB" for image in request.images)


def test_base64_split_over_lines_is_accepted():
    wrapped = base64.encodebytes(encoded()).decode()
    assert "\n" in wrapped
    assert len(parse({"prompt": "x", "images": [wrapped]}).images) == 1


@pytest.mark.parametrize("image, words", [
    (data_url(image_format="GIF"), "PNG, JPEG or WebP"),
    (plain_base64(image_format="GIF"), "GIF images are not accepted"),
    (data_url(size=(63, 200)), "at least 64"),
    ("data:image/png;base64," + plain_base64(image_format="JPEG"), "bytes are JPEG"),
    ("data:image/png,rawbytes", "data:image/png;base64"),
    ("%%%not base64%%%", "base64"),
    (base64.b64encode(b"just some text").decode(), "not a readable"),
    (base64.b64encode(encoded()[:60]).decode(), "not a readable"),
    (42, "base64 string or a data URL"),
])
def test_unusable_reference_images_are_refused_by_position(image, words):
    error = refusal({"prompt": "x", "images": [data_url(), image]})
    assert error.field == "images[1]"
    assert words in error.message


def test_the_number_of_reference_images_is_bounded_by_the_server_setting():
    assert len(parse({"prompt": "x", "images": [data_url()] * 6}, max_images=6).images) == 6
    assert refusal({"prompt": "x", "images": [data_url()] * 2}, max_images=1).field == "images"
    assert refusal({"prompt": "x", "images": data_url()}).field == "images"


def test_a_body_must_be_a_json_object():
    assert parse_json_body(b'{"prompt": "x"}') == {"prompt": "x"}
    for raw in (b"{prompt", b"\xff\xfe"):
        with pytest.raises(ClientError) as caught:
            parse_json_body(raw)
        assert (caught.value.status, caught.value.field) == (400, "body")
    assert refusal(["prompt"]).field == "body"
