/**
 * envtrain's Qwen3-style chat template (ChatML), written for this project. On conversations with and without
 * tools it renders what Qwen3's own template renders, with one deliberate difference that Qwen3's training variant
 * (used by TRL for tool-calling GRPO) also makes: every assistant turn carries its `<think>…</think>` block, even
 * an empty one in history, so a conversation rendered up to turn k is a prefix of the same conversation rendered
 * up to turn k+1 and earlier tokens never need re-tokenising. Its output is that of TRL's `qwen3_training.jinja`
 * (checked by the interop suite), so it is also the training template envtrain swaps in for a Qwen3 model's own
 * (rollout's `TrainingTemplate`). A `content` with `</think>` is split as Qwen3 splits it: the reasoning before
 * (after any `<think>`), the content after, both without their joining newlines.
 *
 * Inputs: `messages` (role system|user|assistant|tool; assistant may have `reasoning_content` and `tool_calls`
 * whose `arguments` are an object or a JSON string), `tools` (JSON-schema function definitions),
 * `add_generation_prompt`, `enable_thinking` (false appends an empty think block to the generation prompt).
 */
export const QWEN3_STYLE_TEMPLATE = String.raw`{#- envtrain Qwen3-style chat template. -#}
{%- set has_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if has_system -%}{{- messages[0].content + '\n\n' -}}{%- endif -%}
  {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
  {%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' -}}
  {{- '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}' -}}
  {{- '\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
  {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- set content = message.content if message.content is string else '' -%}
  {%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}
    {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
  {%- elif message.role == 'assistant' -%}
    {%- set reasoning = '' -%}
    {%- if message.reasoning_content is string -%}
      {%- set reasoning = message.reasoning_content -%}
    {%- elif '</think>' in content -%}
      {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
      {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
    {%- endif -%}
    {{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}
    {%- if message.tool_calls -%}
      {%- for call in message.tool_calls -%}
        {%- if content or not loop.first -%}{{- '\n' -}}{%- endif -%}
        {%- set fn = call.function if call.function else call -%}
        {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
        {%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
        {{- '}\n</tool_call>' -}}
      {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
  {%- elif message.role == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
  {%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}
{%- endif -%}`
