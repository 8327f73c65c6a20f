/* Route (a), entry: the dlsym that programs call while libuvmpool.so is preloaded.
 * Lookups with RTLD_DEFAULT or RTLD_NEXT depend on who is asking: glibc reads the return address to
 * find the caller's scope. Those are passed on with a jump, not a call, so glibc still sees the
 * program's return address and answers exactly as without uvmpool. Lookups in a given handle do not
 * depend on the caller and go to uvmpool_dlsym_in_handle (dlsym_hook.cpp). x86-64 only. */
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    test %rdi, %rdi                   /* RTLD_DEFAULT */
    je 1f
    cmp $-1, %rdi                     /* RTLD_NEXT */
    je 1f
    jmp uvmpool_dlsym_in_handle
1:
    mov uvmpool_glibc_dlsym(%rip), %rax
    test %rax, %rax
    je 2f
    jmp *%rax
2:                                    /* glibc's dlsym not yet known: only before our constructor */
    push %rdi
    .cfi_adjust_cfa_offset 8
    push %rsi
    .cfi_adjust_cfa_offset 8
    sub $8, %rsp                      /* 16-byte alignment for the call */
    .cfi_adjust_cfa_offset 8
    call uvmpool_dlsym_resolve        /* finds it with dlvsym, calls nothing else */
    add $8, %rsp
    .cfi_adjust_cfa_offset -8
    pop %rsi
    .cfi_adjust_cfa_offset -8
    pop %rdi
    .cfi_adjust_cfa_offset -8
    test %rax, %rax
    je 3f
    jmp *%rax                         /* a jump still: RTLD_NEXT is answered for our caller */
3:
    ret                               /* no glibc dlsym: NULL */
    .cfi_endproc
    .size dlsym, .-dlsym

    .section .note.GNU-stack,"",@progbits
