int dummy_placeholder;
