"""LiveCodeBench's generation prompts per model style (``lcb_runner/prompts/code_generation.py``) and the code
the official ``extract_code`` takes from a reply."""
from __future__ import annotations

from snapeval.errors import check_choice

# The official prompt texts (lcb_runner/prompts/code_generation.py at LiveCodeBench 28fef95, PromptConstants).
SYSTEM_INTRO = ("You will be given a question (problem specification) and will generate a correct Python program "
                "that matches the specification and passes all tests.")
#: ``SYSTEM_MESSAGE_GENERIC`` (line 14): the system message of the chat model styles (OpenAIChat, LLaMa3, ...).
SYSTEM_MESSAGE_GENERIC = "You are an expert Python programmer. " + SYSTEM_INTRO
#: ``SYSTEM_MESSAGE_DEEPSEEK_R1`` (lines 28-33): the conversation preamble of the DeepSeekR1 style, ending in the
#: user turn's token; the prompt then ends in ``<｜Assistant｜>``.
SYSTEM_MESSAGE_DEEPSEEK_R1 = (
    "<｜begin▁of▁sentence｜>A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.<｜User｜>")
ASSISTANT_DEEPSEEK_R1 = "<｜Assistant｜>"
#: The preamble's own text: what the DeepSeek-R1 chat template, given it as the system message, puts between its
#: ``<｜begin▁of▁sentence｜>`` and ``<｜User｜>`` (``livecodebench_r1``'s description).
R1_PREAMBLE = SYSTEM_MESSAGE_DEEPSEEK_R1.removeprefix("<｜begin▁of▁sentence｜>").removesuffix("<｜User｜>")
FORMAT_WITH_STARTER = ("You will use the following starter code to write the solution to the problem and enclose "
                       "your code within delimiters.")
FORMAT_STDIN = ("Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test "
                "on the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python "
                "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.")
#: Prompt styles of :func:`build_prompt`: ``deepseek_r1`` the DeepSeekR1 question text, for a chat template
#: (``livecodebench``; ``livecodebench_r1`` with the preamble as its system message); ``deepseek_r1_full`` the whole
#: official DeepSeekR1 prompt, preamble and chat tokens included; ``generic`` the chat model styles' user message,
#: whose system message is :data:`SYSTEM_MESSAGE_GENERIC` (``livecodebench_generic``).
PROMPT_STYLES = ("deepseek_r1", "deepseek_r1_full", "generic")


def _format_part(doc: dict, prefix: str = "") -> str:
    """The format instruction with the starter code, or with the stub of a stdin program."""
    if doc["starter_code"]:
        return f"{prefix}{FORMAT_WITH_STARTER}\n```python\n{doc['starter_code']}\n```\n\n"
    return f"{prefix}{FORMAT_STDIN}\n```python\n# YOUR CODE HERE\n```\n\n"


def build_prompt(doc: dict, style: str = "deepseek_r1") -> str:
    """The official generation prompt of a model style (:data:`PROMPT_STYLES`):

    - ``deepseek_r1``: ``get_deepseek_r1_question_template_answer`` (``code_generation.py:155-166``) without its
      closing ``<｜Assistant｜>``, for the model's chat template to wrap (the text QwQ's ``livecodebench_v5.jsonl``
      carries);
    - ``deepseek_r1_full``: ``format_prompt_generation`` for ``LMStyle.DeepSeekR1`` (lines 333-336): the preamble
      :data:`SYSTEM_MESSAGE_DEEPSEEK_R1`, that question text and ``<｜Assistant｜>``, a complete prompt (what the
      DeepSeek-R1 chat template makes of :data:`R1_PREAMBLE` as system message and the question text as user
      message);
    - ``generic``: ``get_generic_question_template_answer`` (lines 40-51), the user message of the chat styles
      (OpenAIChat, LLaMa3, ...) whose system message is :data:`SYSTEM_MESSAGE_GENERIC`.
    """
    check_choice("prompt_style", style, PROMPT_STYLES)
    if style == "generic":
        return (f"### Question:\n{doc['question_content']}\n\n" + _format_part(doc, "### Format: ")
                + "### Answer: (use the provided format with backticks)\n\n")
    question = f"{SYSTEM_INTRO}\n\nQuestion: {doc['question_content']}\n\n" + _format_part(doc)
    if style == "deepseek_r1_full":
        return SYSTEM_MESSAGE_DEEPSEEK_R1 + question + ASSISTANT_DEEPSEEK_R1
    return question


def extract_code(response: str) -> str | None:
    """The official ``extract_code`` (``lcb_runner/utils/extraction_utils.py``, chat models): the lines between the
    last two lines that contain a code fence, from the whole response (a thinking section included); ``None`` when
    fewer than two lines do (the official then grades an empty program, which fails)."""
    lines = response.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return None
    return "\n".join(lines[fences[-2] + 1:fences[-1]])
